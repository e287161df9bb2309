"""Grafana dashboards as code: typed specs rendered to Grafana JSON with grafana-foundation-sdk.

`spec` holds the frozen dataclasses (panels, rows, template variables), `promql` the shared label selectors
and targets; `pipeline_overview`, `kafka` and `exporter_health` each define one dashboard; `build` renders
them with the SDK into `generated/<uid>.json`, which is committed and which Grafana imports as it is (the
Pulumi Monitoring component ships them as ConfigMaps for the Grafana sidecar).

    python -m monitoring.dashboards.build            # regenerate generated/*.json (make dashboards)
    python -m monitoring.dashboards.build --check    # fail if generated/ is out of date

The spec modules import nothing but the standard library, so `streamstack panels` renders the overview's
queries to a PNG without the SDK.
"""
