"""The stack's secrets, read as Pulumi secrets and never part of `load()`: Grafana's admin password and the
alert notifiers' URLs and keys."""

from __future__ import annotations

import re

import pulumi

from infra.config.base import PREFIX, ConfigError, setting
from infra.config.monitoring import ALERT_SEVERITIES, NOTIFIER_SECRETS, URL_NOTIFIERS, AlertingConfig

# The one secret setting: a plain string read only with `get_secret`, never part of `load()`'s sections.
GRAFANA_ADMIN_PASSWORD = "grafanaAdminPassword"
# The CDC database login's password (streamstack:cdc): Kafka Connect's, and the in-cluster PostgreSQL's.
CDC_DATABASE_PASSWORD = "cdcDatabasePassword"


def grafana_admin_password() -> pulumi.Output[str] | None:
    """The optional stack secret `streamstack:grafanaAdminPassword` as a Pulumi secret, None when unset.

    A value set without `--secret` sits in plain text in Pulumi.<stack>.yaml, and so in the repository: it
    raises ConfigError naming the key (the CLI tells the program which keys are secret:
    PULUMI_CONFIG_SECRET_KEYS, read by the language host into `pulumi.runtime.is_config_secret`)."""
    password = pulumi.Config(PREFIX).get_secret(GRAFANA_ADMIN_PASSWORD)
    if password is None:
        return None
    if not pulumi.runtime.is_config_secret(setting(GRAFANA_ADMIN_PASSWORD)):
        raise ConfigError(
            f"{setting(GRAFANA_ADMIN_PASSWORD)}: set in plain text; remove it "
            f"(`pulumi config rm {GRAFANA_ADMIN_PASSWORD}`), choose a new password and set it with "
            f"`pulumi config set --secret {GRAFANA_ADMIN_PASSWORD} <password>`"
        )
    # The raw value, read without wrapping it: checked before any resource exists, never printed.
    if not str(pulumi.runtime.get_config(setting(GRAFANA_ADMIN_PASSWORD))).strip():
        raise ConfigError(
            f"{setting(GRAFANA_ADMIN_PASSWORD)}: empty; set a password with "
            f"`pulumi config set --secret {GRAFANA_ADMIN_PASSWORD} <password>`, or remove the setting "
            "to let the chart generate one"
        )
    return password


def alerting_secrets(alerting: AlertingConfig) -> dict[str, pulumi.Output[str]]:
    """notifier -> its URL or key (NOTIFIER_SECRETS) as a Pulumi secret, for each one set.

    Like `grafana_admin_password`: a value set without `--secret` raises ConfigError naming the key, as does
    an empty one, a URL without http(s)://, or a secret no severity of `streamstack:alerting` uses (a misspelt
    routing would otherwise drop it silently). A notifier a severity names whose secret is unset is left out
    of the routing with a warning in the preview: that severity's alerts reach only its other notifiers."""
    config = pulumi.Config(PREFIX)
    secrets: dict[str, pulumi.Output[str]] = {}
    for notifier, key in NOTIFIER_SECRETS.items():
        value = config.get_secret(key)
        used_by = [severity for severity in ALERT_SEVERITIES if notifier in getattr(alerting, severity)]
        command = f"`pulumi config set --secret {key} <{'url' if notifier in URL_NOTIFIERS else 'key'}>`"
        if value is None:
            if used_by:
                pulumi.log.warn(
                    f"{setting(key)}: not set, so {' and '.join(used_by)} alerts do not reach {notifier} "
                    f"({setting('alerting')}); set it with {command}"
                )
            continue
        if not pulumi.runtime.is_config_secret(setting(key)):
            raise ConfigError(
                f"{setting(key)}: set in plain text; remove it (`pulumi config rm {key}`), revoke it where "
                f"it was issued and set a new one with {command}"
            )
        # The raw value, checked before any resource exists and never printed.
        raw = str(pulumi.runtime.get_config(setting(key))).strip()
        if not raw:
            raise ConfigError(f"{setting(key)}: empty; set it with {command} or remove it")
        if notifier in URL_NOTIFIERS and not re.match(r"^https?://[^\s/]+", raw):
            raise ConfigError(f"{setting(key)}: not an http(s):// URL; set it with {command}")
        if not used_by:
            raise ConfigError(
                f"{setting(key)}: set, but neither {setting('alerting.critical')} nor "
                f"{setting('alerting.warning')} names {notifier}: add it to the severities it is for, or "
                f"remove the secret (`pulumi config rm {key}`)"
            )
        secrets[notifier] = value
    return secrets


def cdc_database_password(enabled: bool) -> pulumi.Output[str] | None:
    """The stack secret `streamstack:cdcDatabasePassword` as a Pulumi secret while CDC is enabled; None when
    it is unset (the preview warns and the stack leaves CDC out: nothing can log in without it).

    Like `grafana_admin_password`: a value set without `--secret` raises ConfigError naming the key, as does
    an empty one; a value set while CDC is disabled does too (it would be ignored silently)."""
    password = pulumi.Config(PREFIX).get_secret(CDC_DATABASE_PASSWORD)
    command = f"`pulumi config set --secret {CDC_DATABASE_PASSWORD} <password>`"
    if password is None:
        if enabled:
            pulumi.log.warn(
                f"{setting(CDC_DATABASE_PASSWORD)}: not set, so the stack leaves change data capture out "
                f"({setting('cdc')}: no Kafka Connect, no database); set it with {command}"
            )
        return None
    if not pulumi.runtime.is_config_secret(setting(CDC_DATABASE_PASSWORD)):
        raise ConfigError(
            f"{setting(CDC_DATABASE_PASSWORD)}: set in plain text; remove it (`pulumi config rm "
            f"{CDC_DATABASE_PASSWORD}`), change the database password and set it with {command}"
        )
    # The raw value, checked before any resource exists and never printed.
    if not str(pulumi.runtime.get_config(setting(CDC_DATABASE_PASSWORD))).strip():
        raise ConfigError(f"{setting(CDC_DATABASE_PASSWORD)}: empty; set it with {command}")
    if not enabled:
        raise ConfigError(
            f"{setting(CDC_DATABASE_PASSWORD)}: set, but {setting('cdc.enabled')} is not true: enable CDC or "
            f"remove the secret (`pulumi config rm {CDC_DATABASE_PASSWORD}`)"
        )
    return password
