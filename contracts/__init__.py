"""What the jobs, the exporter, the CLI and the Pulumi program must agree on, importable by all of them.

This package imports none of `infra`, `jobs`, `monitoring` or `streamstack`.
"""
