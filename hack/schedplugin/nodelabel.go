package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	fwk "k8s.io/kube-scheduler/framework"
	"sigs.k8s.io/yaml"
)

// Name is the plugin's name in a KubeSchedulerConfiguration.
const Name = "KubeherdNodeLabel"

// Args are the plugin's args (pluginConfig[].args): a node passes the filter only if it carries
// the label Label, with the value Value when one is given.
type Args struct {
	Label string `json:"label"`
	Value string `json:"value,omitempty"`
}

// NodeLabel filters out the nodes without the label its args name.
type NodeLabel struct {
	args Args
}

var (
	_ fwk.FilterPlugin = (*NodeLabel)(nil)
	_ fwk.SignPlugin   = (*NodeLabel)(nil)
)

// New builds the plugin. Invalid args are an error, so kube-scheduler refuses to start with
// them and says why.
func New(_ context.Context, configuration runtime.Object, _ fwk.Handle) (fwk.Plugin, error) {
	args, err := decodeArgs(configuration)
	if err != nil {
		return nil, fmt.Errorf("%s args: %w", Name, err)
	}
	return &NodeLabel{args: args}, nil
}

// decodeArgs reads the args strictly: a field the plugin does not know (a misspelt one) is an
// error, not silently ignored as encoding/json would.
func decodeArgs(configuration runtime.Object) (Args, error) {
	var args Args
	if configuration == nil {
		return args, errors.New("label is required: give the node label a pod's node must carry")
	}
	raw, ok := configuration.(*runtime.Unknown)
	if !ok {
		return args, fmt.Errorf("args of type %T cannot be read", configuration)
	}
	text := raw.Raw
	switch raw.ContentType {
	case runtime.ContentTypeJSON, "":
	case runtime.ContentTypeYAML:
		converted, err := yaml.YAMLToJSON(text)
		if err != nil {
			return args, err
		}
		text = converted
	default:
		return args, fmt.Errorf("args of content type %q cannot be read", raw.ContentType)
	}
	decoder := json.NewDecoder(bytes.NewReader(text))
	decoder.DisallowUnknownFields()
	if err := decoder.Decode(&args); err != nil {
		return args, errors.New(strings.TrimPrefix(err.Error(), "json: "))
	}
	return args, validateArgs(args)
}

func validateArgs(args Args) error {
	var problems []string
	if args.Label == "" {
		problems = append(problems, "label is required: give the node label a pod's node must carry")
	} else {
		for _, problem := range validation.IsQualifiedName(args.Label) {
			problems = append(problems, fmt.Sprintf("label %q: %s", args.Label, problem))
		}
	}
	for _, problem := range validation.IsValidLabelValue(args.Value) {
		problems = append(problems, fmt.Sprintf("value %q: %s", args.Value, problem))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// Name returns the plugin's name.
func (pl *NodeLabel) Name() string {
	return Name
}

// Filter lets the pod onto the node only if the node has the label (with the value, if set).
func (pl *NodeLabel) Filter(_ context.Context, _ fwk.CycleState, _ *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	node := nodeInfo.Node()
	if node == nil {
		return fwk.NewStatus(fwk.Error, "node not found")
	}
	value, found := node.Labels[pl.args.Label]
	if found && (pl.args.Value == "" || value == pl.args.Value) {
		return nil
	}
	want := pl.args.Label
	if pl.args.Value != "" {
		want += "=" + pl.args.Value
	}
	return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("node(s) without label %s (%s)", want, Name))
}

// SignPod says the filter's answer does not depend on the pod: pods may share scheduling
// results as far as this plugin is concerned.
func (pl *NodeLabel) SignPod(_ context.Context, _ *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	return nil, nil
}
