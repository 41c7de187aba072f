package main

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"
	schedulerframework "k8s.io/kubernetes/pkg/scheduler/framework"
)

func jsonArgs(text string) runtime.Object {
	return &runtime.Unknown{Raw: []byte(text), ContentType: runtime.ContentTypeJSON}
}

func TestInvalidArgsAreRefusedSayingWhy(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  runtime.Object
		error string
	}{
		{"no args", nil, "label is required"},
		{"no label", jsonArgs(`{}`), "label is required"},
		{"a misspelt field", jsonArgs(`{"lable": "zone"}`), `unknown field "lable"`},
		{"a label that is no label key", jsonArgs(`{"label": "not a key!"}`), `label "not a key!"`},
		{"a value that is no label value", jsonArgs(`{"label": "zone", "value": "a b"}`), `value "a b"`},
		{"a label of the wrong type", jsonArgs(`{"label": 3}`), "cannot unmarshal number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(context.Background(), tc.args, nil)
			if err == nil || !strings.Contains(err.Error(), tc.error) || !strings.HasPrefix(err.Error(), Name+" args: ") {
				t.Fatalf("want an error containing %q, got %v", tc.error, err)
			}
		})
	}
}

func TestOnlyNodesWithTheLabelPass(t *testing.T) {
	yamlArgs := &runtime.Unknown{Raw: []byte("label: pool\nvalue: fast\n"), ContentType: runtime.ContentTypeYAML}
	for _, tc := range []struct {
		name   string
		args   runtime.Object
		labels map[string]string
		passes bool
	}{
		{"the label", jsonArgs(`{"label": "pool"}`), map[string]string{"pool": "slow"}, true},
		{"no label", jsonArgs(`{"label": "pool"}`), map[string]string{"zone": "a"}, false},
		{"the label and value", yamlArgs, map[string]string{"pool": "fast"}, true},
		{"another value", yamlArgs, map[string]string{"pool": "slow"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plugin, err := New(context.Background(), tc.args, nil)
			if err != nil {
				t.Fatal(err)
			}
			node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: tc.labels}}
			nodeInfo := schedulerframework.NewNodeInfo()
			nodeInfo.SetNode(node)
			status := plugin.(fwk.FilterPlugin).Filter(context.Background(), nil, &v1.Pod{}, nodeInfo)
			if status.IsSuccess() != tc.passes {
				t.Fatalf("passes: want %v, got %v (%v)", tc.passes, status.IsSuccess(), status)
			}
			if !tc.passes && status.Code() != fwk.UnschedulableAndUnresolvable {
				t.Fatalf("want UnschedulableAndUnresolvable, got %v", status)
			}
		})
	}
}
