"""Run the Pulumi program of a stack under mocks and capture what it would create.

No Pulumi CLI or cluster is needed: the program runs in this process, the way Pulumi's Python language host
runs it (config from `Pulumi.<stack>.yaml`, working directory = the program directory, `runpy`), against a
mock engine that records every resource registration. Kubernetes resources come back as manifests, Helm
releases of upstream charts as records (chart, version, repository, namespace, values), and the stack's
exports as plain values. Pulumi secrets and Secret data are redacted; secure config values are replaced by
placeholders (they cannot be decrypted without the CLI).

A chart installed from a local chart directory (our charts/, as a `helm.v4.Chart` or a `helm.v3.Release`)
renders nothing under mocks, so it is rendered here with the real helm (`helm template` with the values the
program passed, for the stack's Kubernetes version; a values.schema.json violation fails the render as it
fails `pulumi preview`), and its objects join the manifests. The resource options Pulumi would give each of
them are recorded too: `retainOnDelete` from `helm.sh/resource-policy: keep` (what the Chart resource does)
and whatever the chart's `transforms` set.

    rendered = render_stack("dev")
    rendered.manifests        # [{"apiVersion": ..., "kind": ..., "metadata": ..., "spec": ...}, ...]
    rendered.helm_releases    # [HelmRelease(chart="strimzi-kafka-operator", version="1.2.0", ...), ...]
    rendered.local_charts     # [LocalChart(chart_dir=.../charts/streaming-job, objects=(...)), ...]
    rendered.outputs          # {"kafkaBootstrap": "...", ...}
    write_rendered(rendered, Path("out"))
"""

from streamstack.render import records
from streamstack.render.helm import helm_template, pulumi_type, render_local_chart
from streamstack.render.output import manifest_filename, to_yaml, validate_rendered, write_rendered
from streamstack.render.program import render_stack
from streamstack.render.project import Project, load_project, stack_config
from streamstack.render.records import *  # noqa: F403 (every record type and constant is public here)

__all__ = [
    "Project",
    "helm_template",
    "load_project",
    "manifest_filename",
    "pulumi_type",
    "render_local_chart",
    "render_stack",
    "stack_config",
    "to_yaml",
    "validate_rendered",
    "write_rendered",
]
__all__ += records.__all__
