package kit

import (
	_ "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	_ "github.com/santhosh-tekuri/jsonschema/v6"
	_ "k8s.io/api/apps/v1"
	_ "sigs.k8s.io/kustomize/api/krusty"
	_ "sigs.k8s.io/yaml"
)
