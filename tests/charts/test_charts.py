"""Our charts under the real helm: lint, render, validate every object, reject bad values, and check that the
rendered objects fit together (the job's flags, the exporter's settings, volumes, scraping, network flows)."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobs.common.config import StreamingJobConfig
from monitoring.lag_exporter.config import parse_args as parse_exporter_args
from streamstack import runtimes
from streamstack.errors import StreamstackError
from streamstack.paths import REPO_ROOT
from streamstack.render.validate import validate_manifests
from tests.charts.helm import (
    CHARTS_DIR,
    KUBE_VERSION,
    NAMESPACES,
    Scenario,
    of_kind,
    one,
    pipeline_arguments,
    render,
    run_helm,
    scenarios,
    spark_pods,
    template,
)

SCENARIOS = scenarios()
JOB_SCENARIOS = [scenario for scenario in SCENARIOS if scenario.chart == "streaming-job"]
EXPORTER_SCENARIOS = [scenario for scenario in SCENARIOS if scenario.chart == "lag-exporter"]
SCRAM_JAAS_LINE = (
    'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="p";'
)
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def ids(items: list[Scenario]) -> list[str]:
    return [item.id for item in items]


def merged_values(scenario: Scenario) -> dict[str, Any]:
    """The chart's defaults with the scenario's file on top, merged the way helm merges them."""

    def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
        result = dict(base)
        for key, value in override.items():
            both_maps = isinstance(value, dict) and isinstance(result.get(key), dict)
            result[key] = merge(result[key], value) if both_maps else value
        return result

    values: dict[str, Any] = yaml.safe_load((scenario.chart_dir / "values.yaml").read_text())
    if scenario.values_file:
        values = merge(values, yaml.safe_load(scenario.values_file.read_text()))
    return values


def test_every_chart_has_ci_scenarios() -> None:
    for chart in NAMESPACES:
        assert len(list((CHARTS_DIR / chart / "ci").glob("*.yaml"))) >= 2, chart


@pytest.mark.parametrize("scenario", SCENARIOS, ids=ids(SCENARIOS))
def test_helm_lint_strict_passes(helm: Path, scenario: Scenario) -> None:
    result = run_helm(helm, ["lint", "--strict", str(scenario.chart_dir), *scenario.values_args()])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


@pytest.mark.parametrize("scenario", SCENARIOS, ids=ids(SCENARIOS))
def test_every_rendered_object_is_valid(helm: Path, scenario: Scenario) -> None:
    manifests = render(helm, scenario)
    # The pods Spark builds from the SparkApplication's pod templates are core Pods too: strict-validating
    # them checks the templates, which the CRD leaves unchecked (x-kubernetes-preserve-unknown-fields).
    pods = [pod for app in of_kind(manifests, "SparkApplication") for pod in spark_pods(app)]
    errors = validate_manifests([*manifests, *pods], kubernetes_version=KUBE_VERSION)
    assert errors == []
    for manifest in manifests:
        metadata = manifest["metadata"]
        assert metadata["namespace"] == NAMESPACES[scenario.chart], metadata["name"]
        assert len(metadata["name"]) <= 63
        assert metadata["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        assert metadata["labels"]["app.kubernetes.io/part-of"] == "streamstack"


def test_default_objects(helm: Path) -> None:
    job = render(helm, Scenario("streaming-job", None))
    assert sorted(manifest["kind"] for manifest in job) == [
        "NetworkPolicy",
        "NetworkPolicy",
        "PersistentVolumeClaim",
        "PodMonitor",
        "SparkApplication",
    ]
    exporter = render(helm, Scenario("lag-exporter", None))
    assert sorted(manifest["kind"] for manifest in exporter) == [
        "Deployment",
        "NetworkPolicy",
        "Service",
        "ServiceAccount",
        "ServiceMonitor",
    ]


SCHEMA_VIOLATIONS = [
    ("streaming-job", ["--set", "replicas=2"], "additional properties 'replicas' not allowed"),
    ("streaming-job", ["--set", "checkpoint.sise=2Gi"], "additional properties 'sise' not allowed"),
    ("streaming-job", ["--set", "checkpoint.accessMode=ReadWriteAll"], "/checkpoint/accessMode"),
    ("streaming-job", ["--set", "job.module=wordcount"], "/job/module"),
    ("streaming-job", ["--set", "kafka.securityProtocol=SCRAM"], "/kafka/securityProtocol"),
    ("streaming-job", ["--set", "kafka.bootstrapServers=null"], "missing property 'bootstrapServers'"),
    ("streaming-job", ["--set", "kafka.bootstrapServers=kafka"], "/kafka/bootstrapServers"),
    ("streaming-job", ["--set", "image.tag=latest"], "/image/tag"),
    ("streaming-job", ["--set", "executor.instances=two"], "/executor/instances"),
    ("streaming-job", ["--set", "podSecurityContext.runAsNonRoot=false"], "/podSecurityContext/runAsNonRoot"),
    ("streaming-job", ["--set", "job.triggerInterval=5s"], "/job/triggerInterval"),
    ("lag-exporter", ["--set", "exporter.refreshIntervall=5"], "additional properties 'refreshIntervall'"),
    ("lag-exporter", ["--set", "exporter.granularity=group"], "/exporter/granularity"),
    ("lag-exporter", ["--set", "exporter.logLevel=TRACE"], "/exporter/logLevel"),
    ("lag-exporter", ["--set", "kafka.bootstrapServers=null"], "missing property 'bootstrapServers'"),
    ("lag-exporter", ["--set", "resources.limits=null"], "missing property 'limits'"),
    ("lag-exporter", ["--set", "securityContext.allowPrivilegeEscalation=true"], "allowPrivilegeEscalation"),
    ("lag-exporter", ["--set", "checkpoints[0].name=a"], "missing property 'claimName'"),
]


@pytest.mark.parametrize(
    ("chart", "values", "message"), SCHEMA_VIOLATIONS, ids=[f"{c}:{v[1]}" for c, v, _ in SCHEMA_VIOLATIONS]
)
def test_values_that_break_the_schema_are_rejected(
    helm: Path, chart: str, values: list[str], message: str
) -> None:
    rendered = template(helm, chart, values)
    assert rendered.returncode != 0, f"helm template accepted {values}"
    assert message in rendered.stderr
    linted = run_helm(helm, ["lint", "--strict", str(CHARTS_DIR / chart), *values])
    assert linted.returncode != 0, f"helm lint accepted {values}"
    assert message in linted.stdout + linted.stderr


CONFLICTS = [
    ("streaming-job", ["--set", "job.stateful=true"], "checkpoint.accessMode ReadWriteOnce: a stateful job"),
    (
        "streaming-job",
        ["--set", "job.stateful=true", "--set", "checkpoint.accessMode=ReadWriteOncePod"],
        "checkpoint.accessMode ReadWriteOncePod: a stateful job",
    ),
    ("streaming-job", ["--set", "kafka.securityProtocol=SASL_SSL"], "kafka.sasl.secretName is required"),
    ("streaming-job", ["--set", "sparkVersion=4.2.0"], "sparkVersion 4.2.0: the image tag says Spark 4.3.0"),
    (
        "streaming-job",
        ["--set-string", r"sparkConf.spark\.kubernetes\.driver\.volumes\.emptyDir\.tmp\.mount\.path=/x"],
        "sparkConf.spark.kubernetes.driver.volumes.emptyDir.tmp.mount.path: the chart manages this setting",
    ),
    (
        "streaming-job",
        ["--set", "extraEnv.STREAMSTACK_KAFKA_SECURITY_PROTOCOL=SSL"],
        "extraEnv.STREAMSTACK_KAFKA_SECURITY_PROTOCOL",
    ),
    (
        "streaming-job",
        ["--set", "metrics.podMonitor.scrapeTimeout=1m"],
        "metrics.podMonitor.scrapeTimeout 1m: must not exceed metrics.podMonitor.interval 15s",
    ),
    (
        "streaming-job",
        ["--set", "kafka.tls.caSecretName=ca"],
        "kafka.tls.caSecretName is set but kafka.securityProtocol PLAINTEXT",
    ),
    ("lag-exporter", ["--set", "exporter.window=15"], "exporter.window 15: must be at least twice"),
    ("lag-exporter", ["--set", "kafka.securityProtocol=SASL_PLAINTEXT"], "kafka.sasl.secretName is required"),
    ("lag-exporter", ["--set", "kafka.tls.caSecretName=ca"], "kafka.tls.caSecretName is set but"),
    (
        "lag-exporter",
        ["--set", "extraEnv[0].name=STREAMSTACK_LAG_WINDOW", "--set", "extraEnv[0].value=1"],
        "extraEnv STREAMSTACK_LAG_WINDOW: the chart sets this variable",
    ),
    (
        "lag-exporter",
        ["--set-json", 'checkpoints=[{"name":"a","claimName":"x"},{"name":"a","claimName":"y"}]'],
        'checkpoints: name "a" given more than once',
    ),
    ("lag-exporter", ["--set", "postgres.host=db"], "postgres.user is required with postgres.host"),
    (
        "lag-exporter",
        [
            "--set-json",
            'postgres={"host":"db","port":5432,"user":"u","database":"d","slot":"s",'
            '"passwordSecret":{"name":"","key":"password"},"walDiskBytes":0}',
        ],
        "postgres.passwordSecret.name is required with postgres.host",
    ),
]


@pytest.mark.parametrize(
    ("chart", "values", "message"), CONFLICTS, ids=[f"{c}:{m.split(':')[0]}" for c, _, m in CONFLICTS]
)
def test_settings_that_cannot_work_together_fail_naming_the_field(
    helm: Path, chart: str, values: list[str], message: str
) -> None:
    result = template(helm, chart, values)
    assert result.returncode != 0, f"helm template accepted {values}"
    assert message in result.stderr


@pytest.mark.parametrize("scenario", JOB_SCENARIOS, ids=ids(JOB_SCENARIOS))
def test_job_arguments_are_the_jobs_own_flags(helm: Path, scenario: Scenario) -> None:
    values = merged_values(scenario)
    module = values["job"]["module"]
    given = [] if values["job"]["extraArguments"] else pipeline_arguments(module)
    app = one(render(helm, scenario, given), "SparkApplication")
    spec = app["spec"]
    assert spec["mainApplicationFile"] == f"local:///opt/streamstack/app/jobs/{module}/__main__.py"
    assert (REPO_ROOT / "jobs" / module / "__main__.py").is_file()
    # The arguments go through the job's own parser, exactly as spark-submit hands them to it.
    job_config = importlib.import_module(f"jobs.{module}.main").parse_args(spec["arguments"])
    streaming: StreamingJobConfig = job_config.streaming
    assert streaming.bootstrap_servers == values["kafka"]["bootstrapServers"]
    assert streaming.checkpoint_dir == values["checkpoint"]["mountPath"]
    assert streaming.metrics_host == "0.0.0.0"
    assert streaming.metrics_port == values["metrics"]["port"]
    assert streaming.trigger_interval == values["job"]["triggerInterval"]
    assert streaming.shuffle_partitions == values["job"]["shufflePartitions"]
    assert streaming.max_offsets_per_trigger == (values["job"]["maxOffsetsPerTrigger"] or None)
    assert streaming.shadow_group_prefix == (values["job"]["shadowGroupPrefix"] or None)
    assert streaming.master is None  # spark-submit sets the master
    if values["job"]["queryName"]:
        assert streaming.query_name == values["job"]["queryName"]


def test_job_modules_in_the_schema_are_the_jobs_in_the_repository() -> None:
    schema = json.loads((CHARTS_DIR / "streaming-job" / "values.schema.json").read_text())
    in_schema = set(schema["properties"]["job"]["properties"]["module"]["enum"])
    in_repository = {path.parent.name for path in (REPO_ROOT / "jobs").glob("*/__main__.py")}
    assert in_schema == in_repository


@pytest.mark.parametrize("scenario", JOB_SCENARIOS, ids=ids(JOB_SCENARIOS))
def test_checkpoint_volume_reaches_the_pods_through_spark_conf(helm: Path, scenario: Scenario) -> None:
    values = merged_values(scenario)
    manifests = render(helm, scenario)
    app = one(manifests, "SparkApplication")
    spec, conf = app["spec"], app["spec"]["sparkConf"]
    checkpoint = values["checkpoint"]
    if checkpoint["existingClaim"]:
        assert of_kind(manifests, "PersistentVolumeClaim") == []
        claim_name = checkpoint["existingClaim"]
    else:
        claim = one(manifests, "PersistentVolumeClaim")
        assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        assert claim["spec"]["accessModes"] == [checkpoint["accessMode"]]
        assert claim["spec"]["resources"]["requests"]["storage"] == checkpoint["size"]
        assert claim["spec"].get("storageClassName", "") == checkpoint["storageClassName"]
        claim_name = claim["metadata"]["name"]
    roles = ["driver", "executor"] if values["job"]["stateful"] else ["driver"]
    for role in ("driver", "executor"):
        prefix = f"spark.kubernetes.{role}.volumes.persistentVolumeClaim.checkpoints"
        if role in roles:
            assert conf[f"{prefix}.mount.path"] == checkpoint["mountPath"]
            assert conf[f"{prefix}.options.claimName"] == claim_name
        else:
            assert not any(key.startswith(prefix) for key in conf)
        # /tmp and the work directory are writable although the root filesystem is read-only.
        for volume, path in (("tmp", "/tmp"), ("work-dir", "/opt/spark/work-dir")):
            assert conf[f"spark.kubernetes.{role}.volumes.emptyDir.{volume}.mount.path"] == path
        # Nothing that only spark-operator's mutating webhook would apply.
        for webhook_only in ("volumeMounts", "securityContext", "podSecurityContext", "env", "ports"):
            assert webhook_only not in spec[role], f"{role}.{webhook_only} needs the webhook"
    assert "volumes" not in spec
    for key, value in values["sparkConf"].items():
        assert conf[key] == str(value)


@pytest.mark.parametrize("scenario", JOB_SCENARIOS, ids=ids(JOB_SCENARIOS))
def test_pods_are_restricted(helm: Path, scenario: Scenario) -> None:
    app = one(render(helm, scenario), "SparkApplication")
    for pod in spark_pods(app):
        pod_spec = pod["spec"]
        assert pod_spec["securityContext"]["runAsNonRoot"] is True
        assert pod_spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        container = pod_spec["containers"][0]
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert {mount["mountPath"] for mount in container["volumeMounts"]} >= {"/tmp", "/opt/spark/work-dir"}
        assert (
            set(container["resources"]["requests"])
            == set(container["resources"]["limits"])
            == {
                "cpu",
                "memory",
            }
        )
        assert pod_spec["automountServiceAccountToken"] is (
            pod["metadata"]["labels"]["spark-role"] == "driver"
        )


@pytest.mark.parametrize(
    "scenario", [s for s in JOB_SCENARIOS if merged_values(s)["metrics"]["podMonitor"]["enabled"]], ids=str
)
def test_podmonitor_scrapes_the_driver_metrics_port(helm: Path, scenario: Scenario) -> None:
    values = merged_values(scenario)
    manifests = render(helm, scenario)
    monitor = one(manifests, "PodMonitor")
    driver, executor = spark_pods(one(manifests, "SparkApplication"))
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= driver["metadata"]["labels"].items()
    assert not selector.items() <= executor["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [NAMESPACES["streaming-job"]]
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    ports = {port["name"]: port["containerPort"] for port in driver["spec"]["containers"][0]["ports"]}
    assert ports[endpoint["port"]] == values["metrics"]["port"]
    assert monitor["metadata"]["labels"].items() >= values["metrics"]["podMonitor"]["labels"].items()


def test_sasl_credentials_come_only_from_the_secret(helm: Path) -> None:
    job_manifests = render(
        helm, Scenario("streaming-job", CHARTS_DIR / "streaming-job/ci/stateful-rwx-sasl.yaml")
    )
    conf = one(job_manifests, "SparkApplication")["spec"]["sparkConf"]
    for role in ("driver", "executor"):
        key = f"spark.kubernetes.{role}.secretKeyRef.STREAMSTACK_KAFKA_SASL_JAAS_CONFIG"
        assert conf[key] == "sessionization:sasl.jaas.config"
    assert conf["spark.kubernetes.driverEnv.STREAMSTACK_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
    assert conf["spark.executorEnv.STREAMSTACK_KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512"

    exporter_manifests = render(
        helm, Scenario("lag-exporter", CHARTS_DIR / "lag-exporter/ci/sasl-ssl-checkpoints.yaml")
    )
    container = one(exporter_manifests, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    env = {item["name"]: item for item in container["env"]}
    assert env["STREAMSTACK_KAFKA_SASL_JAAS_CONFIG"]["valueFrom"] == {
        "secretKeyRef": {"name": "lag-exporter", "key": "sasl.jaas.config"}
    }
    for name, item in env.items():
        if "JAAS" in name or "PASSWORD" in name:
            assert "value" not in item, name
    for key in conf:
        if "JAAS" in key:
            assert ".secretKeyRef." in key, key
    for manifests in (job_manifests, exporter_manifests):
        assert of_kind(manifests, "Secret") == []


@pytest.mark.parametrize("scenario", JOB_SCENARIOS, ids=ids(JOB_SCENARIOS))
def test_kafka_settings_reach_the_jobs_as_they_read_them(
    helm: Path, scenario: Scenario, tmp_path: Path
) -> None:
    """The environment Spark gives driver and executors, with the Secret's JAAS line and the CA file in
    place, is what the jobs' own KafkaSecurity accepts, with the protocol the values asked for."""
    from contracts.kafka_security import KafkaSecurity  # noqa: PLC0415 - the clients' contract, only here

    values = merged_values(scenario)
    for pod in spark_pods(one(render(helm, scenario), "SparkApplication")):
        (container,) = pod["spec"]["containers"]
        mounts = {mount["mountPath"] for mount in container["volumeMounts"]}
        environment = {}
        for variable in container["env"]:
            if "valueFrom" in variable:
                reference = variable["valueFrom"]["secretKeyRef"]
                assert (reference["name"], reference["key"]) == (
                    values["kafka"]["sasl"]["secretName"],
                    values["kafka"]["sasl"]["jaasConfigKey"],
                )
                environment[variable["name"]] = SCRAM_JAAS_LINE
            else:
                environment[variable["name"]] = variable["value"]
        if "STREAMSTACK_KAFKA_SSL_CA_FILE" in environment:
            ca_file = Path(environment["STREAMSTACK_KAFKA_SSL_CA_FILE"])
            assert str(ca_file.parent) in mounts
            environment["STREAMSTACK_KAFKA_SSL_CA_FILE"] = str(tmp_path / "ca.crt")
            (tmp_path / "ca.crt").write_text("test CA")
        security = KafkaSecurity.from_environment(environment)
        assert security.security_protocol == values["kafka"]["securityProtocol"]
        assert (security.ssl_ca_file is not None) == bool(values["kafka"]["tls"]["caSecretName"])


@pytest.mark.parametrize("scenario", EXPORTER_SCENARIOS, ids=ids(EXPORTER_SCENARIOS))
def test_exporter_settings_are_its_real_flags(helm: Path, scenario: Scenario, tmp_path: Path) -> None:
    values = merged_values(scenario)
    manifests = render(helm, scenario)
    deployment = one(manifests, "Deployment")
    pod_spec = deployment["spec"]["template"]["spec"]
    (container,) = pod_spec["containers"]
    env = {}
    for item in container["env"]:
        env[item["name"]] = item.get("value", SCRAM_JAAS_LINE)  # the Secret's JAAS line
    mounts = {mount["mountPath"]: mount for mount in container["volumeMounts"]}
    if "STREAMSTACK_KAFKA_SSL_CA_FILE" in env:
        ca_file = Path(env["STREAMSTACK_KAFKA_SSL_CA_FILE"])
        assert str(ca_file.parent) in mounts
        env["STREAMSTACK_KAFKA_SSL_CA_FILE"] = str(tmp_path / "ca.crt")
        (tmp_path / "ca.crt").write_text("test CA")
    # The exporter's own parser reads the rendered environment and arguments.
    config = parse_exporter_args(container.get("args", []), env)
    exporter = values["exporter"]
    assert (config.listen_host, config.listen_port) == ("0.0.0.0", exporter["port"])
    assert container["ports"] == [{"name": "metrics", "containerPort": exporter["port"], "protocol": "TCP"}]
    assert config.bootstrap_servers == values["kafka"]["bootstrapServers"]
    assert config.refresh_interval == exporter["refreshInterval"]
    assert config.window == exporter["window"]
    assert config.granularity == exporter["granularity"]
    assert config.shadow_prefix == exporter["shadowPrefix"]
    assert [pattern.pattern for pattern in config.groups.allow] == exporter["groupAllow"]
    assert [pattern.pattern for pattern in config.topics.deny] == exporter["topicDeny"]
    assert config.include_groups == exporter["includeGroups"]
    assert config.commit_log == exporter["commitLog"]
    assert config.log_level == exporter["logLevel"]
    assert config.security.security_protocol == values["kafka"]["securityProtocol"]
    assert [checkpoint.name for checkpoint in config.checkpoints] == [
        c["name"] for c in values["checkpoints"]
    ]
    for checkpoint in config.checkpoints:
        assert mounts[str(checkpoint.path)]["readOnly"] is True
    # The CDC replication slot: the `postgres` values as the exporter parses them, the password only as a
    # read-only file of the Secret, and egress to the database on its port.
    postgres = values["postgres"]
    if not postgres["host"]:
        assert config.source is None
    else:
        source = config.source
        assert source is not None and source.password_file is not None
        assert (source.host, source.port, source.user, source.database, source.slot) == tuple(
            postgres[key] for key in ("host", "port", "user", "database", "slot")
        )
        assert source.wal_disk_bytes == postgres["walDiskBytes"]
        mount = mounts[str(source.password_file.parent)]
        assert mount["readOnly"] is True
        (volume,) = [v for v in pod_spec["volumes"] if v["name"] == mount["name"]]
        secret = postgres["passwordSecret"]
        assert volume["secret"]["secretName"] == secret["name"]
        assert volume["secret"]["items"] == [{"key": secret["key"], "path": source.password_file.name}]
        assert not any("PASSWORD" in name for name in env)
        egress = one(manifests, "NetworkPolicy")["spec"]["egress"]
        allowed = values["networkPolicy"]["postgres"]
        assert {
            "to": [{"ipBlock": {"cidr": cidr}} for cidr in allowed["cidrs"]],
            "ports": [{"port": allowed["port"], "protocol": "TCP"}],
        } in egress
    service = one(manifests, "Service")
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    assert pod_spec["automountServiceAccountToken"] is False
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"/tmp"} <= set(mounts)


def test_network_policies_allow_only_the_needed_flows(helm: Path) -> None:
    job_values = merged_values(Scenario("streaming-job", None))
    job = render(helm, Scenario("streaming-job", None))
    app_labels = spark_pods(one(job, "SparkApplication"))[0]["metadata"]["labels"]
    policies = {policy["metadata"]["name"]: policy["spec"] for policy in of_kind(job, "NetworkPolicy")}
    every_pod, driver_only = policies["ci-streaming-job"], policies["ci-streaming-job-driver"]
    for spec in (every_pod, driver_only):
        assert spec["policyTypes"] == ["Ingress", "Egress"]
        assert spec["podSelector"]["matchLabels"].items() <= app_labels.items()
        for rule in spec["ingress"]:
            assert rule["from"], "an ingress rule without peers admits everything"
        for rule in spec["egress"]:
            assert rule["to"], "an egress rule without peers allows everything"
    assert every_pod["ingress"] == [{"from": [{"podSelector": every_pod["podSelector"]}]}]
    egress_ports = [sorted(port["port"] for port in rule.get("ports", [])) for rule in every_pod["egress"]]
    assert egress_ports == [[], job_values["networkPolicy"]["kafka"]["ports"], [53, 53]]
    (scrape,) = driver_only["ingress"]
    assert scrape["ports"] == [{"port": job_values["metrics"]["port"], "protocol": "TCP"}]
    assert scrape["from"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "monitoring"
    }
    # No API server addresses by default: no API egress at all (an empty `to` would allow everything).
    assert driver_only["egress"] == []
    api_server = ['networkPolicy.kubeApiServer.cidrs=["172.18.0.0/16"]']
    result = template(helm, "streaming-job", ["--set-json", *api_server])
    assert result.returncode == 0, result.stderr
    named = [doc for doc in yaml.safe_load_all(result.stdout) if doc and doc["kind"] == "NetworkPolicy"]
    (api,) = next(doc["spec"] for doc in named if doc["metadata"]["name"] == "ci-streaming-job-driver")[
        "egress"
    ]
    assert api["to"] == [{"ipBlock": {"cidr": "172.18.0.0/16"}}]
    assert [port["port"] for port in api["ports"]] == [443, 6443]
    for catch_all in ("0.0.0.0/0", "::/0"):
        refused = template(
            helm, "streaming-job", ["--set-json", f'networkPolicy.kubeApiServer.cidrs=["{catch_all}"]']
        )
        assert refused.returncode != 0 and "kubeApiServer" in refused.stderr, refused.stderr

    exporter = render(helm, Scenario("lag-exporter", None))
    spec = one(exporter, "NetworkPolicy")["spec"]
    (scrape,) = spec["ingress"]
    assert scrape["ports"] == [{"port": 9308, "protocol": "TCP"}]
    assert [sorted(port["port"] for port in rule["ports"]) for rule in spec["egress"]] == [[9092], [53, 53]]


def test_names_are_truncated_to_63_characters(helm: Path) -> None:
    release = "a-release-name-of-the-longest-length-helm-accepts-053"
    for chart in NAMESPACES:
        result = run_helm(
            helm,
            ["template", release, str(CHARTS_DIR / chart), "--namespace", NAMESPACES[chart]],
        )
        assert result.returncode == 0, result.stderr
        for manifest in yaml.safe_load_all(result.stdout):
            if not manifest:
                continue
            assert len(manifest["metadata"]["name"]) <= 63, manifest["metadata"]["name"]
            for value in manifest["metadata"]["labels"].values():
                assert len(value) <= 63 and LABEL_VALUE.match(value), value
            if manifest["kind"] == "PersistentVolumeClaim":
                assert manifest["metadata"]["name"].endswith("-checkpoints")


@pytest.mark.parametrize("chart", sorted(NAMESPACES))
def test_every_values_key_is_commented(chart: str) -> None:
    """Every key of the values surface has a comment right above it; keys inside pass-through maps
    (securityContext, labels, sparkConf) are described by their parent's comment."""
    schema = json.loads((CHARTS_DIR / chart / "values.schema.json").read_text())
    lines = (CHARTS_DIR / chart / "values.yaml").read_text().splitlines()
    key_line = re.compile(r"^( *)([A-Za-z0-9_.-]+):")
    entries: list[tuple[tuple[str, ...], bool]] = []
    stack: list[tuple[int, str]] = []
    previous = ""
    for line in lines:
        match = key_line.match(line)
        if match:
            indent = len(match.group(1))
            stack = [(level, key) for level, key in stack if level < indent]
            stack.append((indent, match.group(2)))
            entries.append((tuple(key for _, key in stack), previous.lstrip().startswith("#")))
        if line.strip():
            previous = line

    def on_surface(path: tuple[str, ...]) -> bool:
        node = schema
        for key in path[:-1]:
            node = node.get("properties", {}).get(key, {})
        return node.get("additionalProperties") is False

    uncommented = [".".join(path) for path, has_comment in entries if on_surface(path) and not has_comment]
    assert uncommented == []
    assert len(entries) > 20


def test_helm_is_the_pinned_build(helm: Path) -> None:
    # locate_go_tools reads the module version the binary was built from (`go version -m`).
    assert runtimes.locate_go_tools()["helm"] == helm
    result = run_helm(helm, ["version", "--template", "{{ .Version }}"])
    assert (result.returncode, result.stdout) == (0, "v3.22")


def test_the_go_tools_step_runs_on_the_standard_library_alone(helm: Path) -> None:
    """`make test` builds helm and actionlint with the machine's Python while pip fills the virtualenv, so
    that step must not import a third-party package: here no site-packages at all (-S), no environment
    (-E), and still the tools are found."""
    base_python = getattr(sys, "_base_executable", sys.executable)
    entry = (
        f"import sys; sys.path.insert(0, {str(REPO_ROOT)!r}); from streamstack.runtimes.command import main; "
    )
    entry += "raise SystemExit(main(['--go-tools', '--check']))"
    result = subprocess.run(
        [base_python, "-S", "-E", "-c", entry], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert f"helm         {helm}" in result.stdout.splitlines()


def test_setup_names_the_missing_tools(tmp_path: Path) -> None:
    with pytest.raises(StreamstackError) as missing_go_tools:
        runtimes.locate_go_tools(tmp_path)
    assert "helm v3.22.0 and actionlint v1.7.12 missing" in str(missing_go_tools.value)
    assert "make setup-all" in str(missing_go_tools.value)
    with pytest.raises(StreamstackError, match=r"checkov 3\.3\.30 missing .*make setup-all"):
        runtimes.locate_checkov(tmp_path)


def test_large_whole_numbers_reach_the_job_as_whole_numbers(helm: Path) -> None:
    """Helm reads numbers from values files and JSON as floats; a cap such as 5,000,000 records must not
    become `5e+06`, which the job's parser refuses (Pulumi passes its values as JSON)."""
    result = template(
        helm,
        "streaming-job",
        [
            *("--set-json", "job.maxOffsetsPerTrigger=5000000"),
            *("--set-json", "job.shufflePartitions=1200000"),
            *pipeline_arguments("clickstream_windows"),
        ],
    )
    assert result.returncode == 0, result.stderr
    app = one([document for document in yaml.safe_load_all(result.stdout) if document], "SparkApplication")
    parsed = importlib.import_module("jobs.clickstream_windows.main").parse_args(app["spec"]["arguments"])
    assert parsed.streaming.max_offsets_per_trigger == 5_000_000
    assert parsed.streaming.shuffle_partitions == 1_200_000
