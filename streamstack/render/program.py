"""Run a stack's Pulumi program under the mock engine, the way Pulumi's Python language host runs it, and
collect what it registered as a RenderedStack."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import runpy
import sys
import traceback
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime import settings
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from streamstack.errors import StreamstackError
from streamstack.paths import REPO_ROOT
from streamstack.render.helm import _helm_release, _local_chart_dir, _manifest, render_local_chart
from streamstack.render.mocks import EchoMocks, RecordingMonitor, _ErrorLog
from streamstack.render.project import Project, _kubernetes_version, load_project, stack_config
from streamstack.render.records import (
    HELM_CHART_TYPE,
    HELM_RELEASE_TYPE,
    REMOTE_COMPONENT_TYPES,
    SECRET_PLACEHOLDER,
    UNKNOWN_PLACEHOLDER,
    HelmRelease,
    LocalChart,
    ProgramError,
    Registration,
    RenderedStack,
)


def render_stack(
    stack: str,
    *,
    project_dir: Path = REPO_ROOT,
    program_dir: Path | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> RenderedStack:
    """Run the stack's program under mocks (a preview) and return what it would create.

    `overrides` replace config values (`key` or `namespace:key`); `program_dir` replaces `main:` from
    Pulumi.yaml. A failing program raises ProgramError with the program's own message.
    """
    project = load_project(project_dir)
    program = (program_dir or project.program_dir).resolve()
    if not (program / "__main__.py").is_file():
        raise StreamstackError(f"no Pulumi program at {program} (expected __main__.py)")
    config, secret_keys = stack_config(project, stack, overrides)
    # A thread of its own starts with an empty context and no event loop: Pulumi's context-variable state
    # (config, root stack, settings) and its event loop stay away from the caller's and from other runs.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"render-{stack}") as runner:
        return runner.submit(_render_in_context, project, program, stack, config, secret_keys).result()


def _render_in_context(
    project: Project, program: Path, stack: str, config: dict[str, str], secret_keys: list[str]
) -> RenderedStack:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    error_log = _ErrorLog()
    logger = logging.getLogger(f"streamstack.render.{stack}")
    logger.propagate = False
    logger.addHandler(error_log)
    try:
        settings.reset_options(
            project=project.name, stack=stack, root_directory=str(project.root), preview=True
        )
        pulumi.runtime.set_all_config(config, secret_keys)
        monitor = RecordingMonitor(EchoMocks())
        pulumi.runtime.set_mocks(
            monitor.mocks, project=project.name, stack=stack, preview=True, logger=logger, monitor=monitor
        )
        root: Any = settings.get_root_resource()  # the Stack that set_mocks created
        exported: dict[str, Any] = {}

        async def run_program() -> None:
            runpy.run_path(str(program), run_name="__main__")
            exported.update(await _resolve_outputs(dict(root.outputs)))

        try:
            # The environment lasts until every registration is done: the SDK reads the program's type
            # annotations (from its modules' globals) while it serializes inputs.
            with _program_environment(program):
                _sync_await(run_pulumi_func(run_program))
        except Exception as error:
            logged = "".join(f"\n  {message}" for message in error_log.messages)
            raise ProgramError(
                f"the Pulumi program for stack {stack!r} failed: {type(error).__name__}: {error}"
                f"{_where(error, project.root)}{logged}"
            ) from error
        if error_log.messages:
            raise ProgramError(f"the Pulumi program for stack {stack!r} logged errors: {error_log.messages}")
        return _rendered(
            stack,
            {**config, "__project__": project.name},
            monitor.registrations,
            exported,
            program=program,
            loop=loop,
        )
    finally:
        logger.removeHandler(error_log)
        loop.close()


def _where(error: BaseException, project_root: Path) -> str:
    """` (at infra/x.py:12)`: the project's innermost line in the traceback. Left out for a ValueError,
    the program's own verdict on its config (a guard rail), whose message says what to change."""
    if isinstance(error, ValueError):
        return ""
    innermost = ""
    root, environment = project_root.resolve(), Path(sys.prefix).resolve()
    for frame in traceback.extract_tb(error.__traceback__):
        path = Path(frame.filename).resolve()
        if path.is_relative_to(root) and not path.is_relative_to(environment):
            innermost = f" (at {path.relative_to(root)}:{frame.lineno})"
    return innermost


@contextlib.contextmanager
def _program_environment(program: Path) -> Iterator[None]:
    """What the language host does (cwd = program dir, program dir first on sys.path), undone afterwards;
    modules the program imported from its directory are dropped so the next run imports them afresh."""
    previous_cwd = Path.cwd()
    modules_before = set(sys.modules)
    sys.path.insert(0, str(program))
    os.chdir(program)
    try:
        yield
    finally:
        os.chdir(previous_cwd)
        with contextlib.suppress(ValueError):
            sys.path.remove(str(program))
        for name in set(sys.modules) - modules_before:
            module_file = getattr(sys.modules[name], "__file__", None)
            if module_file and Path(module_file).resolve().is_relative_to(program):
                del sys.modules[name]


async def _resolve_outputs(outputs: Mapping[str, Any]) -> dict[str, Any]:
    resolved: dict[str, Any] = {}
    for name, value in outputs.items():
        output = pulumi.Output.from_input(value)
        if await output.is_secret():
            resolved[name] = SECRET_PLACEHOLDER
        elif not await output.is_known():
            resolved[name] = UNKNOWN_PLACEHOLDER
        else:
            resolved[name] = _plain_output(await output.future())
    return resolved


def _plain_output(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(key): _plain_output(child) for key, child in value.items()}
    if isinstance(value, list | tuple):
        return [_plain_output(child) for child in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def _rendered(
    stack: str,
    config: dict[str, str],
    registrations: list[Registration],
    outputs: dict[str, Any],
    *,
    program: Path,
    loop: asyncio.AbstractEventLoop,
) -> RenderedStack:
    manifests: list[dict[str, Any]] = []
    releases: list[HelmRelease] = []
    local_charts: list[LocalChart] = []
    unrendered: list[str] = []
    kubernetes_version = _kubernetes_version(config)
    for registration in registrations:
        local = (
            _local_chart_dir(registration, program)
            if registration.type in (HELM_CHART_TYPE, HELM_RELEASE_TYPE)
            else None
        )
        if local is not None:
            local_charts.append(render_local_chart(registration, local, kubernetes_version, loop))
        elif registration.type in REMOTE_COMPONENT_TYPES:
            unrendered.append(f"{registration.type} {registration.name}")
        elif registration.type == HELM_RELEASE_TYPE:
            releases.append(_helm_release(registration))
        elif registration.custom and registration.type.startswith("kubernetes:"):
            manifests.append(_manifest(registration))
    manifests += [item.manifest for chart in local_charts for item in chart.objects]
    manifests.sort(
        key=lambda item: (item["kind"], item["metadata"].get("namespace", ""), item["metadata"]["name"])
    )
    releases.sort(key=lambda release: (release.namespace or "", release.release_name))
    local_charts.sort(key=lambda chart: (chart.namespace, chart.release_name))
    return RenderedStack(
        stack=stack,
        config=config,
        manifests=manifests,
        helm_releases=releases,
        outputs=outputs,
        registrations=list(registrations),
        unrendered=unrendered,
        local_charts=local_charts,
    )
