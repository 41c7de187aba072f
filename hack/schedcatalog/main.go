// Command schedcatalog derives kubeherd's scheduler catalog of one Kubernetes minor from that
// minor's own k8s.io/kubernetes module, and prints it as JSON on stdout.
//
// It is built against each pinned minor in turn (go run -modfile=../k8s/<minor>/go.mod .), so one
// source must compile against all of them: it names only packages and functions that every minor
// has, and reaches what moved between minors (the framework's interfaces, the recorder type) by
// type inference and reflection. README.md beside this file describes the output.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiruntime "k8s.io/apimachinery/pkg/runtime"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/dynamic/dynamicinformer"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	configv1 "k8s.io/kube-scheduler/config/v1"
	// kube-scheduler's command registers feature gates of its own (logging, component-base) when
	// it is imported: the catalog lists the gates the real binary knows.
	_ "k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/pkg/scheduler"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	plfeature "k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/profile"
)

const (
	kubernetesModule = "k8s.io/kubernetes"
	// The profile that builds one plugin at a time.
	probeSchedulerName = "kubeherd-catalog-probe"
	// Every framework needs exactly one queue-sort and at least one bind plugin; these two are the
	// in-tree ones kube-scheduler enables by default.
	queueSortPlugin = "PrioritySort"
	bindPlugin      = "DefaultBinder"
	// The file that lists the plugin names v1 refuses as removed, in k8s.io/kubernetes.
	validationSource = "pkg/scheduler/apis/config/validation/validation.go"
)

type pluginEntry struct {
	ExtensionPoints []string `json:"extensionPoints"`
}

type profileDefaults struct {
	Plugins      json.RawMessage `json:"plugins"`
	PluginConfig json.RawMessage `json:"pluginConfig"`
}

type catalog struct {
	Kubernetes         string                 `json:"kubernetes"`
	Minor              string                 `json:"minor"`
	ExtensionPoints    []string               `json:"extensionPoints"`
	Plugins            map[string]pluginEntry `json:"plugins"`
	UnbuildablePlugins map[string]string      `json:"unbuildablePlugins"`
	RemovedPlugins     []string               `json:"removedPlugins"`
	DefaultProfile     profileDefaults        `json:"defaultProfile"`
	ArgsTypes          map[string]any         `json:"argsTypes"`
	SchedulerFeatures  map[string]bool        `json:"schedulerFeatures"`
	FeatureGates       map[string]bool        `json:"featureGates"`
}

func main() {
	// The schedulers built here log as they start (which plugins, which gates): kept, and shown
	// only when the derivation fails.
	var logs bytes.Buffer
	klog.LogToStderr(false)
	klog.SetOutput(&logs)
	if err := run(); err != nil {
		klog.Flush()
		os.Stderr.Write(logs.Bytes())
		fmt.Fprintln(os.Stderr, "schedcatalog:", err)
		os.Exit(1)
	}
}

func run() error {
	version, err := kubernetesVersion()
	if err != nil {
		return err
	}
	minor, err := minorOf(version)
	if err != nil {
		return err
	}
	built, unbuildable, err := inTreePlugins()
	if err != nil {
		return err
	}
	removed, err := removedPlugins(version)
	if err != nil {
		return err
	}
	defaults, err := defaultProfile()
	if err != nil {
		return err
	}
	args, err := argsTypes()
	if err != nil {
		return err
	}
	result := catalog{
		Kubernetes:         version,
		Minor:              minor,
		ExtensionPoints:    jsonFieldNames(reflect.TypeFor[configv1.Plugins]()),
		Plugins:            built,
		UnbuildablePlugins: unbuildable,
		RemovedPlugins:     removed,
		DefaultProfile:     defaults,
		ArgsTypes:          args,
		SchedulerFeatures:  schedulerFeatures(),
		FeatureGates:       featureGates(),
	}
	out, err := canonicalJSON(result)
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(out)
	return err
}

// kubernetesVersion is the k8s.io/kubernetes release this binary was built from.
func kubernetesVersion() (string, error) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "", fmt.Errorf("no build information in the binary")
	}
	for _, dep := range info.Deps {
		if dep.Path == kubernetesModule {
			if dep.Replace != nil {
				return "", fmt.Errorf("%s is replaced by %s: derive catalogs from releases only", kubernetesModule, dep.Replace.Path)
			}
			return dep.Version, nil
		}
	}
	return "", fmt.Errorf("%s is not a dependency of this build", kubernetesModule)
}

var releaseVersion = regexp.MustCompile(`^v(\d+)\.(\d+)\.\d+$`)

func minorOf(version string) (string, error) {
	match := releaseVersion.FindStringSubmatch(version)
	if match == nil {
		return "", fmt.Errorf("%s %s is not a release (vMAJOR.MINOR.PATCH)", kubernetesModule, version)
	}
	return match[1] + "." + match[2], nil
}

// inTreePlugins builds, for every plugin of the in-tree registry, a scheduler whose only profile
// enables that plugin under multiPoint, as kube-scheduler would from such a configuration file,
// and reads which extension points the framework put it at.
func inTreePlugins() (map[string]pluginEntry, map[string]string, error) {
	built := map[string]pluginEntry{}
	unbuildable := map[string]string{}
	for name := range plugins.NewInTreeRegistry() {
		points, failure, err := probePlugin(name)
		if err != nil {
			return nil, nil, fmt.Errorf("plugin %s: %w", name, err)
		}
		if failure != "" {
			unbuildable[name] = failure
			continue
		}
		built[name] = pluginEntry{ExtensionPoints: points}
	}
	return built, unbuildable, nil
}

// probePlugin returns the plugin's extension points, or the message kube-scheduler would refuse
// the profile with; err is a failure of the probe itself.
func probePlugin(name string) (points []string, failure string, err error) {
	cfg, err := decodeConfiguration(probeConfiguration(name))
	if err != nil {
		return nil, "", err
	}
	if errs := validation.ValidateKubeSchedulerConfiguration(cfg); errs != nil {
		return nil, errs.Error(), nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	// Cancelling stops the goroutines scheduler.New started (metrics, trackers).
	defer cancel()
	client := fake.NewClientset()
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	sched, err := scheduler.New(ctx,
		client,
		informers.NewSharedInformerFactory(client, 0),
		dynamicinformer.NewDynamicSharedInformerFactory(dynamicfake.NewSimpleDynamicClient(apiruntime.NewScheme()), 0),
		profile.NewRecorderFactory(broadcaster),
		scheduler.WithProfiles(cfg.Profiles...),
	)
	if err != nil {
		return nil, frameworkMessage(err), nil
	}
	framework, ok := sched.Profiles[probeSchedulerName]
	if !ok {
		return nil, "", fmt.Errorf("the scheduler has no profile %q", probeSchedulerName)
	}
	points, err = pointsOf(name, framework.ListPlugins())
	return points, "", err
}

// frameworkMessage is the framework's own error: scheduler.New and the profile map prefix it
// with their context, which names the probe profile rather than anything of the plugin.
func frameworkMessage(err error) string {
	message := err.Error()
	message = strings.TrimPrefix(message, "initializing profiles: ")
	return strings.TrimPrefix(message, "creating profile for scheduler name "+probeSchedulerName+": ")
}

// probeConfiguration is a configuration file whose one profile enables the plugin, with the
// required queue-sort and bind plugins, under multiPoint and nothing else.
func probeConfiguration(name string) []byte {
	enabled := []map[string]string{{"name": name}}
	for _, required := range []string{queueSortPlugin, bindPlugin} {
		if required != name {
			enabled = append(enabled, map[string]string{"name": required})
		}
	}
	return configurationWith(map[string]any{"multiPoint": map[string]any{
		"enabled":  enabled,
		"disabled": []map[string]string{{"name": "*"}},
	}})
}

func configurationWith(plugins map[string]any) []byte {
	document := map[string]any{
		"apiVersion": configv1.SchemeGroupVersion.String(),
		"kind":       "KubeSchedulerConfiguration",
		"profiles": []any{map[string]any{
			"schedulerName": probeSchedulerName,
			"plugins":       plugins,
		}},
	}
	data, err := json.Marshal(document)
	if err != nil {
		panic(err) // maps of strings always marshal
	}
	return data
}

// decodeConfiguration reads a configuration file's content as kube-scheduler does: the v1
// defaults applied, converted to the internal type.
func decodeConfiguration(data []byte) (*config.KubeSchedulerConfiguration, error) {
	obj, gvk, err := scheme.Codecs.UniversalDecoder().Decode(data, nil, nil)
	if err != nil {
		return nil, err
	}
	cfg, ok := obj.(*config.KubeSchedulerConfiguration)
	if !ok {
		return nil, fmt.Errorf("decoded a %s, not a KubeSchedulerConfiguration", gvk)
	}
	return cfg, nil
}

// pointsOf reads, from the framework's list of plugins per extension point (the internal type),
// the v1 JSON names of the points that hold the plugin, sorted.
func pointsOf(name string, listed *config.Plugins) ([]string, error) {
	var versioned configv1.Plugins
	if err := scheme.Scheme.Convert(listed, &versioned, nil); err != nil {
		return nil, err
	}
	data, err := json.Marshal(versioned)
	if err != nil {
		return nil, err
	}
	var sets map[string]struct {
		Enabled []struct {
			Name string `json:"name"`
		} `json:"enabled"`
	}
	if err := json.Unmarshal(data, &sets); err != nil {
		return nil, err
	}
	points := []string{}
	for point, set := range sets {
		for _, plugin := range set.Enabled {
			if plugin.Name == name {
				points = append(points, point)
			}
		}
	}
	sort.Strings(points)
	return points, nil
}

// removedPlugins lists the names the v1 validation refuses as removed. The list it keeps
// (invalidPluginsByVersion) is unexported: its names are read from the source of the very release
// built here, and each is kept only if the exported validation does refuse a profile enabling it
// for that reason, so the validation's own logic decides which entries apply to v1.
func removedPlugins(version string) ([]string, error) {
	source, err := kubernetesSourceFile(version, validationSource)
	if err != nil {
		return nil, err
	}
	candidates, err := parseInvalidPluginNames(source)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	removed := []string{}
	for _, name := range candidates {
		refused, err := validationRefusesAsRemoved(name)
		if err != nil {
			return nil, err
		}
		if refused {
			removed = append(removed, name)
		}
	}
	sort.Strings(removed)
	return removed, nil
}

func kubernetesSourceFile(version, relative string) (string, error) {
	modcache := os.Getenv("GOMODCACHE")
	if modcache == "" {
		out, err := exec.Command("go", "env", "GOMODCACHE").Output()
		if err != nil {
			return "", fmt.Errorf("go env GOMODCACHE: %w", err)
		}
		modcache = strings.TrimSpace(string(out))
	}
	return filepath.Join(modcache, kubernetesModule+"@"+version, relative), nil
}

// parseInvalidPluginNames collects the string literals of every `plugins` list in the entries of
// invalidPluginsByVersion; a source whose shape differs fails rather than yielding fewer names.
func parseInvalidPluginNames(source string) ([]string, error) {
	file, err := parser.ParseFile(token.NewFileSet(), source, nil, 0)
	if err != nil {
		return nil, err
	}
	list := findVar(file, "invalidPluginsByVersion")
	if list == nil {
		return nil, fmt.Errorf("no composite literal invalidPluginsByVersion")
	}
	var names []string
	for _, element := range list.Elts {
		entry, ok := element.(*ast.CompositeLit)
		if !ok {
			return nil, fmt.Errorf("an entry of invalidPluginsByVersion is not a literal")
		}
		for _, field := range entry.Elts {
			pair, ok := field.(*ast.KeyValueExpr)
			if !ok {
				return nil, fmt.Errorf("an entry of invalidPluginsByVersion has unkeyed fields")
			}
			if key, ok := pair.Key.(*ast.Ident); !ok || key.Name != "plugins" {
				continue
			}
			literal, ok := pair.Value.(*ast.CompositeLit)
			if !ok {
				return nil, fmt.Errorf("plugins of an invalidPluginsByVersion entry is not a literal")
			}
			for _, item := range literal.Elts {
				basic, ok := item.(*ast.BasicLit)
				if !ok || basic.Kind != token.STRING {
					return nil, fmt.Errorf("a removed plugin's name is not a string literal")
				}
				name, err := strconv.Unquote(basic.Value)
				if err != nil {
					return nil, err
				}
				names = append(names, name)
			}
		}
	}
	return names, nil
}

func findVar(file *ast.File, name string) *ast.CompositeLit {
	for _, declaration := range file.Decls {
		general, ok := declaration.(*ast.GenDecl)
		if !ok || general.Tok != token.VAR {
			continue
		}
		for _, spec := range general.Specs {
			value, ok := spec.(*ast.ValueSpec)
			if !ok {
				continue
			}
			for i, ident := range value.Names {
				if ident.Name == name && i < len(value.Values) {
					literal, _ := value.Values[i].(*ast.CompositeLit)
					return literal
				}
			}
		}
	}
	return nil
}

// validationRefusesAsRemoved tells whether the v1 validation refuses a profile enabling the
// plugin for being removed (its message says in which config version it was invalidated). The
// validation looks for removed names at the single extension points, not under multiPoint.
func validationRefusesAsRemoved(name string) (bool, error) {
	cfg, err := decodeConfiguration(configurationWith(map[string]any{
		"filter": map[string]any{"enabled": []map[string]string{{"name": name}}},
	}))
	if err != nil {
		return false, err
	}
	errs := validation.ValidateKubeSchedulerConfiguration(cfg)
	if errs == nil {
		return false, nil
	}
	return strings.Contains(errs.Error(), fmt.Sprintf("%q: was invalid in version", name)), nil
}

// defaultProfile is the profile v1 defaulting makes of an empty configuration, in v1 JSON, as
// `kube-scheduler --write-config-to` writes it (there as YAML).
func defaultProfile() (profileDefaults, error) {
	cfg, err := latest.Default()
	if err != nil {
		return profileDefaults{}, err
	}
	info, ok := apiruntime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), apiruntime.ContentTypeJSON)
	if !ok {
		return profileDefaults{}, fmt.Errorf("the scheduler's scheme has no JSON serializer")
	}
	var buffer bytes.Buffer
	if err := scheme.Codecs.EncoderForVersion(info.Serializer, configv1.SchemeGroupVersion).Encode(cfg, &buffer); err != nil {
		return profileDefaults{}, err
	}
	var encoded struct {
		Profiles []profileDefaults `json:"profiles"`
	}
	if err := json.Unmarshal(buffer.Bytes(), &encoded); err != nil {
		return profileDefaults{}, err
	}
	if len(encoded.Profiles) != 1 {
		return profileDefaults{}, fmt.Errorf("the default configuration has %d profiles, not 1", len(encoded.Profiles))
	}
	return encoded.Profiles[0], nil
}

// argsTypes describes every v1 `<Plugin>Args` kind of the scheduler's scheme, keyed by plugin.
func argsTypes() (map[string]any, error) {
	described := map[string]any{}
	for gvk, goType := range scheme.Scheme.AllKnownTypes() {
		if gvk.GroupVersion() != configv1.SchemeGroupVersion || !strings.HasSuffix(gvk.Kind, "Args") {
			continue
		}
		description, err := describeType(goType, map[reflect.Type]bool{})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", gvk.Kind, err)
		}
		described[strings.TrimSuffix(gvk.Kind, "Args")] = description
	}
	return described, nil
}

var durationType = reflect.TypeFor[metav1.Duration]()

// describeType spells a Go type as the catalog does: the JSON scalar kinds by name, "duration"
// for metav1.Duration, lists, string-keyed maps and structs by their JSON fields. Any other kind
// is spelled by its Go kind name (reflect.Kind.String()).
func describeType(goType reflect.Type, inProgress map[reflect.Type]bool) (any, error) {
	for goType.Kind() == reflect.Pointer {
		goType = goType.Elem()
	}
	if goType == durationType {
		return "duration", nil
	}
	switch goType.Kind() {
	case reflect.Slice, reflect.Array:
		element, err := describeType(goType.Elem(), inProgress)
		if err != nil {
			return nil, err
		}
		return map[string]any{"list": element}, nil
	case reflect.Map:
		if goType.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("map %s has keys that are not strings", goType)
		}
		value, err := describeType(goType.Elem(), inProgress)
		if err != nil {
			return nil, err
		}
		return map[string]any{"map": value}, nil
	case reflect.Struct:
		if inProgress[goType] {
			return nil, fmt.Errorf("%s contains itself", goType)
		}
		inProgress[goType] = true
		defer delete(inProgress, goType)
		fields := map[string]any{}
		if err := describeFields(goType, fields, inProgress); err != nil {
			return nil, err
		}
		return map[string]any{"struct": goType.Name(), "fields": fields}, nil
	default:
		return goType.Kind().String(), nil
	}
}

// describeFields adds the JSON fields of a struct, those of embedded and inline structs (TypeMeta)
// flattened into it as encoding/json does.
func describeFields(goType reflect.Type, fields map[string]any, inProgress map[reflect.Type]bool) error {
	for i := range goType.NumField() {
		field := goType.Field(i)
		tag := field.Tag.Get("json")
		name, options, _ := strings.Cut(tag, ",")
		if name == "-" && options == "" {
			continue
		}
		inline := strings.Contains(","+options+",", ",inline,") || (field.Anonymous && name == "")
		if inline {
			embedded := field.Type
			for embedded.Kind() == reflect.Pointer {
				embedded = embedded.Elem()
			}
			if embedded.Kind() == reflect.Struct {
				if err := describeFields(embedded, fields, inProgress); err != nil {
					return err
				}
				continue
			}
		}
		if !field.IsExported() {
			continue
		}
		if name == "" {
			name = field.Name
		}
		description, err := describeType(field.Type, inProgress)
		if err != nil {
			return fmt.Errorf("%s.%s: %w", goType.Name(), field.Name, err)
		}
		fields[name] = description
	}
	return nil
}

// schedulerFeatures is the plugins' feature switches as kube-scheduler fills them from its gates.
func schedulerFeatures() map[string]bool {
	features := reflect.ValueOf(plfeature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate))
	switches := map[string]bool{}
	for i := range features.NumField() {
		if features.Field(i).Kind() == reflect.Bool {
			switches[features.Type().Field(i).Name] = features.Field(i).Bool()
		}
	}
	return switches
}

// featureGates is every gate kube-scheduler's default feature gate knows, with its default.
func featureGates() map[string]bool {
	gates := map[string]bool{}
	for name, spec := range utilfeature.DefaultMutableFeatureGate.GetAll() {
		gates[string(name)] = spec.Default
	}
	return gates
}

// jsonFieldNames lists a struct's JSON field names in declaration order.
func jsonFieldNames(goType reflect.Type) []string {
	names := []string{}
	for i := range goType.NumField() {
		name, _, _ := strings.Cut(goType.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			names = append(names, name)
		}
	}
	return names
}

// canonicalJSON renders the catalog with sorted keys (encoding/json sorts map keys; the raw parts
// are re-read as generic values to sort theirs), two-space indents and a trailing newline.
func canonicalJSON(value any) ([]byte, error) {
	data, err := json.Marshal(value)
	if err != nil {
		return nil, err
	}
	decoder := json.NewDecoder(bytes.NewReader(data))
	decoder.UseNumber()
	var generic any
	if err := decoder.Decode(&generic); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	encoder := json.NewEncoder(&out)
	encoder.SetEscapeHTML(false)
	encoder.SetIndent("", "  ")
	if err := encoder.Encode(generic); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
