"""The stack config: both stack files load into what they say, and every guard rail fails before any resource
exists, with a message that starts with the setting to change."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from contracts.pipeline import load_pipeline
from infra.config import (
    ConfigError,
    KafkaConfig,
    SparkConfig,
    TopicConfig,
    configured_keys,
    require_topic_fits,
)
from tests.infra.conftest import Stack, load_config, run_program, stack_sections


def fails_naming(setting: str, stack: str = "dev", **sections: Any) -> str:
    with pytest.raises(ConfigError) as error:
        load_config(stack, **sections)
    message = str(error.value)
    assert message.startswith(f"{setting}:"), message
    return message


def with_changes(stack: str, section: str, **changes: Any) -> dict[str, Any]:
    return {**stack_sections(stack)[section], **changes}


def test_dev_stack_is_one_dual_role_node_with_local_rwo_checkpoints() -> None:
    config = load_config("dev")
    (pool,) = config.kafka.node_pools
    assert set(pool.roles) == {"controller", "broker"} and pool.replicas == 1
    assert (config.kafka.brokers, config.kafka.replication_factor, config.kafka.min_insync_replicas) == (
        1,
        1,
        1,
    )
    assert {topic.replicas for topic in config.topics} == {1}
    assert config.cluster.nodes == 1
    assert {job.checkpoint.access_mode for job in config.jobs} == {"ReadWriteOnce"}
    assert {job.checkpoint.storage_class for job in config.jobs} == {"standard"}
    assert [job.name for job in config.jobs] == [job.name for job in load_pipeline().jobs]


def test_prod_stack_has_three_controllers_three_brokers_and_rwx_checkpoints() -> None:
    config = load_config("prod")
    pools = {pool.name: pool for pool in config.kafka.node_pools}
    assert (pools["controllers"].roles, pools["controllers"].replicas) == (("controller",), 3)
    assert (pools["brokers"].roles, pools["brokers"].replicas) == (("broker",), 3)
    assert (config.kafka.replication_factor, config.kafka.min_insync_replicas) == (3, 2)
    assert {(topic.replicas, topic.min_insync_replicas) for topic in config.topics} == {(3, 2)}
    assert {job.checkpoint.access_mode for job in config.jobs} == {"ReadWriteMany"}
    assert all(job.checkpoint.protect for job in config.jobs)
    assert config.cluster.nodes > 1


def test_job_entry_overrides_job_defaults_key_by_key() -> None:
    jobs = [{"name": "user-view", "executor": {"instances": 2}}, {"name": "sessionization"}]
    defaults = {"executor": {"instances": 4, "memory": "2g"}, "checkpoint": {"size": "3Gi"}}
    config = load_config("dev", jobs=jobs, jobDefaults=defaults)
    user_view, sessionization = config.jobs
    assert (user_view.executor.instances, user_view.executor.memory) == (2, "2g")
    assert (sessionization.executor.instances, sessionization.executor.memory) == (4, "2g")
    assert user_view.checkpoint.size == "3Gi"


def test_memory_overhead_is_optional_and_layered_like_memory() -> None:
    jobs = [{"name": "user-view", "driver": {"memoryOverhead": "256m"}}, {"name": "sessionization"}]
    defaults = {"driver": {"memoryOverhead": "320m"}, "executor": {"memory": "480m"}}
    user_view, sessionization = load_config("dev", jobs=jobs, jobDefaults=defaults).jobs
    assert (user_view.driver.memory_overhead, sessionization.driver.memory_overhead) == ("256m", "320m")
    # Unset, Spark's own default applies: the chart renders no memoryOverhead.
    assert user_view.executor.memory_overhead is None
    assert user_view.executor.memory == "480m"


def test_catalogue_knows_which_jobs_are_stateful_and_an_entry_may_say_so() -> None:
    config = load_config("dev")
    assert {job.name for job in config.jobs if job.stateful} == {
        "clickstream-windows",
        "sessionization",
        "view-bursts",
        "ad-attribution",
        "order-state",
        "user-enrichment",
        "user-view",
    }
    overridden = load_config("dev", jobs=[{"name": "user-view", "stateful": False}])
    assert not overridden.jobs[0].stateful


# A job of the user's own (outside the catalogue), stateless: every job of the catalogue keeps state.
STATELESS_JOB = {
    "name": "fraud-scores",
    "module": "fraud_scores",
    "stateful": False,
    "topics": {"--input-topic": "page-views", "--output-topic": "dead-letters"},
    "reads": ["--input-topic"],
    "writes": ["--output-topic"],
}


def test_a_job_outside_the_catalogue_must_describe_itself() -> None:
    fails_naming("streamstack:jobs[0].topics", jobs=[{"name": "fraud-scores"}])
    (job,) = load_config("dev", jobs=[STATELESS_JOB]).jobs
    assert (job.module, job.read_topics, job.written_topics) == (
        "fraud_scores",
        ("page-views",),
        ("dead-letters",),
    )


def test_a_misspelt_setting_is_rejected_by_name() -> None:
    message = fails_naming(
        "streamstack:kafka.replicationFactr", kafka=with_changes("dev", "kafka", replicationFactr=1)
    )
    assert "replicationFactor" in message
    fails_naming(
        "streamstack:jobs[1].executor.instance",
        jobs=[{"name": "user-view"}, {"name": "sessionization", "executor": {"instance": 2}}],
    )
    fails_naming("streamstack:jobDefaults.stateful", jobDefaults={"stateful": True})


def test_a_misspelt_top_level_key_fails_the_program_by_name(mocked: Callable[[str], Stack]) -> None:
    with pytest.raises(ConfigError) as error:
        run_program(mocked, "dev", strings={"lagExporters": json.dumps({"enabled": False})})
    message = str(error.value)
    assert message.startswith("streamstack:lagExporters: unknown setting (known: "), message
    assert "lagExporter," in message


def test_keys_from_the_language_host_environment_are_checked_too(
    mocked: Callable[[str], Stack], monkeypatch: pytest.MonkeyPatch
) -> None:
    mocked("dev")
    monkeypatch.setenv(
        "PULUMI_CONFIG", json.dumps({"streamstack:kafka": "{}", "streamstack:grafanaAdminPasword": "x"})
    )
    assert configured_keys() == {"kafka", "grafanaAdminPasword"}
    with pytest.raises(ConfigError, match=r"^streamstack:grafanaAdminPasword: unknown setting"):
        run_program(mocked, "dev")


def test_a_wrongly_typed_setting_is_rejected_by_name() -> None:
    fails_naming("streamstack:cluster.nodes", cluster={"nodes": "three"})
    fails_naming("streamstack:jobDefaults.driver.memory", jobDefaults={"driver": {"memory": "1 GB"}})
    fails_naming(
        "streamstack:jobDefaults.executor.memoryOverhead",
        jobDefaults={"executor": {"memoryOverhead": "320MiB"}},
    )
    fails_naming("streamstack:jobDefaults.triggerInterval", jobDefaults={"triggerInterval": "5s"})


def test_guard_kafka_version_not_supported_by_strimzi() -> None:
    message = fails_naming("streamstack:kafka.version", kafka=with_changes("dev", "kafka", version="3.9.0"))
    assert "Strimzi 1.2.0" in message and "4.3.1" in message
    fails_naming("streamstack:kafka.version", kafka=with_changes("dev", "kafka", version="4.4.0"))
    for supported in ("4.2.0", "4.2.1", "4.3.0", "4.3.1"):
        kafka = with_changes("dev", "kafka", version=supported)
        del kafka["metadataVersion"]
        assert load_config("dev", kafka=kafka).kafka.version == supported
    with pytest.raises(ConfigError, match=re.escape("streamstack:kafka.version")):
        KafkaConfig(version="4.1.1")


def test_guard_metadata_version_newer_than_kafka() -> None:
    kafka = with_changes("dev", "kafka", version="4.2.1", metadataVersion="4.3-IV0")
    fails_naming("streamstack:kafka.metadataVersion", kafka=kafka)


def test_guard_spark_version_must_match_the_image_tag() -> None:
    spark = with_changes("dev", "spark", image="streamstack/jobs:0.1.0-spark4.2.0")
    message = fails_naming("streamstack:spark.image", spark=spark)
    assert "4.3.0" in message
    fails_naming(
        "streamstack:spark.image", spark=with_changes("dev", "spark", image="streamstack/jobs:latest")
    )
    fails_naming("streamstack:spark.image", spark=with_changes("dev", "spark", image="streamstack/jobs"))
    official = with_changes("dev", "spark", image="apache/spark:4.3.0-scala2.13-java17-python3-ubuntu")
    assert load_config("dev", spark=official).spark.image.endswith("4.3.0-scala2.13-java17-python3-ubuntu")


def test_guard_spark_version_must_match_the_operator() -> None:
    spark = with_changes("dev", "spark", version="3.5.5", image="streamstack/jobs:0.1.0-spark3.5.5")
    message = fails_naming("streamstack:spark.version", spark=spark)
    assert "spark-operator 2.5.2" in message
    fails_naming(
        "streamstack:spark.operatorChartVersion",
        spark=with_changes("dev", "spark", operatorChartVersion="2.6.0"),
    )
    with pytest.raises(ConfigError, match=re.escape("streamstack:spark.image")):
        SparkConfig(image="streamstack/jobs:4.2.0")


def test_guard_stateful_job_on_a_driver_only_volume() -> None:
    three_nodes = {"nodes": 3}
    message = fails_naming("streamstack:jobDefaults.checkpoint.accessMode", cluster=three_nodes)
    assert "clickstream-windows is stateful" in message and "ReadWriteOnce" in message
    per_job = [{"name": "ad-attribution", "checkpoint": {"accessMode": "ReadWriteOnce"}}]
    rwx = {"checkpoint": {"accessMode": "ReadWriteMany"}}
    fails_naming(
        "streamstack:jobs[0].checkpoint.accessMode", cluster=three_nodes, jobs=per_job, jobDefaults=rwx
    )
    # A ReadWriteOncePod volume admits the driver's pod only, even on one node.
    fails_naming(
        "streamstack:jobDefaults.checkpoint.accessMode",
        jobDefaults={"checkpoint": {"accessMode": "ReadWriteOncePod"}},
    )
    # An entry that declares a job stateful is held to it, and named as the reason.
    message = fails_naming(
        "streamstack:jobDefaults.checkpoint.accessMode",
        cluster=three_nodes,
        jobs=[{"name": "user-view", "stateful": True}],
    )
    assert "streamstack:jobs[0].stateful" in message


def test_stateless_jobs_may_keep_driver_only_checkpoints_on_many_nodes() -> None:
    stateless = [STATELESS_JOB]
    config = load_config(
        "dev",
        cluster={"nodes": 3},
        jobs=stateless,
        jobDefaults={"checkpoint": {"accessMode": "ReadWriteOncePod"}},
        lagExporter={"image": "streamstack/lag-exporter:0.1.0", "readCheckpoints": False},
    )
    assert {job.checkpoint.access_mode for job in config.jobs} == {"ReadWriteOncePod"}


def test_guard_exporter_reading_checkpoints_it_cannot_mount() -> None:
    stateless = [STATELESS_JOB]
    fails_naming(
        "streamstack:lagExporter.readCheckpoints",
        cluster={"nodes": 2},
        jobs=stateless,
        lagExporter={"image": "streamstack/lag-exporter:0.1.0", "readCheckpoints": True},
    )


def test_guard_replication_factor_above_broker_count() -> None:
    message = fails_naming(
        "streamstack:kafka.replicationFactor", kafka=with_changes("dev", "kafka", replicationFactor=3)
    )
    assert "broker count 1" in message
    message = fails_naming("streamstack:topics.page-views.replicas", topics={"page-views": {"replicas": 2}})
    assert "page-views" in message
    topic = TopicConfig("page-views", 4, 3, {"min.insync.replicas": "1"})
    with pytest.raises(ConfigError, match=re.escape("streamstack:kafka.replicationFactor")):
        require_topic_fits(topic, brokers=1)


def test_guard_topic_record_size_beyond_the_dead_letter_sizing() -> None:
    def topics(name: str, limit: str) -> dict[str, Any]:
        return {name: {"config": {"max.message.bytes": limit}}}

    message = fails_naming(
        "streamstack:topics.page-views.config.max.message.bytes", topics=topics("page-views", "2097152")
    )
    assert "above the 1048588 bytes" in message
    message = fails_naming(
        "streamstack:topics.dead-letters.config.max.message.bytes", topics=topics("dead-letters", "1048588")
    )
    assert "below the 1064972 bytes" in message
    fails_naming("streamstack:topics.page-views.config.max.message.bytes", topics=topics("page-views", "1m"))
    smaller = load_config("dev", topics=topics("page-views", "524288"))
    [page_views] = [topic for topic in smaller.topics if topic.name == "page-views"]
    assert page_views.config["max.message.bytes"] == "524288"


def test_guard_min_insync_replicas_above_replicas() -> None:
    fails_naming(
        "streamstack:kafka.minInsyncReplicas", kafka=with_changes("dev", "kafka", minInsyncReplicas=2)
    )
    prod_topics = {**stack_sections("prod")["topics"], "users": {"minInsyncReplicas": 4}}
    fails_naming("streamstack:topics.users.minInsyncReplicas", stack="prod", topics=prod_topics)


def test_guard_kubernetes_older_than_strimzi_needs() -> None:
    fails_naming("streamstack:cluster.kubernetesVersion", cluster={"kubernetesVersion": "1.29"})


def test_api_server_cidrs_are_cidrs_and_never_the_whole_internet() -> None:
    for bad in ("172.18.0.2/33", "10.0.0.1/28", "any"):
        message = fails_naming(
            "streamstack:cluster.apiServerCidrs[1]", cluster={"apiServerCidrs": ["10.0.0.0/28", bad]}
        )
        assert "not a CIDR" in message
    for catch_all in ("0.0.0.0/0", "::/0"):
        message = fails_naming(
            "streamstack:cluster.apiServerCidrs[0]", cluster={"apiServerCidrs": [catch_all]}
        )
        assert "internet" in message
    assert load_config("dev", cluster={"apiServerCidrs": []}).cluster.api_server_cidrs == ()
    fails_naming("streamstack:cluster.apiServerCidrs", cluster={"apiServerCidrs": "10.0.0.0/28"})
    message = fails_naming(
        "streamstack:cluster.apiServerCidrs", cluster={"apiServerCidrs": ["10.0.0.0/28", "10.0.0.0/28"]}
    )
    assert "twice" in message


def test_node_cidrs_are_cidrs_and_never_the_whole_internet() -> None:
    # A bare address too: Kubernetes refuses an ipBlock without a prefix length.
    for bad in ("172.18.0.2", "172.18.0.0/12", "fd00::/200", "node-1"):
        message = fails_naming("streamstack:cluster.nodeCidrs[0]", cluster={"nodeCidrs": [bad]})
        assert "not a CIDR" in message
    for catch_all in ("0.0.0.0/0", "::/0"):
        message = fails_naming("streamstack:cluster.nodeCidrs[0]", cluster={"nodeCidrs": [catch_all]})
        assert "every address" in message and "InternalIP" in message
    assert load_config("dev", cluster={"nodeCidrs": []}).cluster.node_cidrs == ()
    assert load_config("prod").cluster.node_cidrs == ("10.0.16.0/20",)


def test_job_topics_must_exist_and_flags_must_be_the_jobs_own() -> None:
    fails_naming(
        "streamstack:jobs[0].topics", jobs=[{"name": "sessionization", "topics": {"--output-topic": "nope"}}]
    )
    fails_naming(
        "streamstack:jobs[0].topics.--input", jobs=[{"name": "sessionization", "topics": {"--input": "x"}}]
    )


def test_guard_job_name_must_leave_room_for_its_checkpoint_claim() -> None:
    long_name = "a-job-whose-name-is-too-long-for-its-claim-name-xyz"  # 51 characters: fits
    assert len(long_name) == 51
    custom = {
        "module": "user_view",
        "stateful": False,
        "reads": ["--users-topic"],
        "writes": ["--output-topic"],
    }
    topics = {"--users-topic": "users", "--output-topic": "user-view"}
    config = load_config("dev", jobs=[{"name": long_name, **custom, "topics": topics}])
    assert config.jobs[0].checkpoint_claim == f"{long_name}-checkpoints"
    message = fails_naming(
        "streamstack:jobs[0].name", jobs=[{"name": long_name + "z", **custom, "topics": topics}]
    )
    assert "51 characters" in message


def test_load_generator_is_on_in_dev_off_in_prod_and_checked_by_name() -> None:
    assert load_config("dev").load_generator.enabled is True
    assert load_config("prod").load_generator.enabled is False
    fails_naming("streamstack:loadGenerator.enable", loadGenerator={"enable": True})
    fails_naming("streamstack:loadGenerator.enabled", loadGenerator={"enabled": "yes"})
