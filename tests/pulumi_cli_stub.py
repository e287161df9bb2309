"""A stand-in for the Pulumi CLI (3.272.0) in tests of the scripts that drive it: the kind workflow and
README.md's kind steps. No Pulumi CLI can be installed here (FIELD_NOTES.md), so this keeps the state the real
CLI keeps, where it keeps it, and refuses what the real one refuses, with its messages:

- `login file://<folder>`: the folder must exist (pulumi/pulumi#24316: "problem logging in: unable to open
  bucket file://...: stat ...: no such file or directory"); the current backend is recorded in
  `$PULUMI_HOME/credentials.json`. Only local (file://) backends: the stack must need no Pulumi Cloud account.
- Every stack command needs a login (otherwise the real CLI falls back to Pulumi Cloud, which needs
  PULUMI_ACCESS_TOKEN in a non-interactive session) and a `Pulumi.yaml` in the working directory or above.
- `stack select NAME` fails for a stack that was never created ("no stack named 'NAME' found");
  `stack select NAME --create` and `stack init NAME` create it in the backend folder
  (`.pulumi/stacks/<project>/<stack>.json`, the local backend's layout), which needs the passphrase of the
  passphrase secrets provider (PULUMI_CONFIG_PASSPHRASE, else the file PULUMI_CONFIG_PASSPHRASE_FILE names;
  an empty value counts as unset here) and writes `encryptionsalt:` into `Pulumi.<stack>.yaml` as the real CLI
  does. An `encryptionsalt` made with another passphrase (or a real one, which this stub cannot check) fails
  as the real CLI does with the wrong passphrase.
- `config set [--path] KEY VALUE` needs the stack (no passphrase for a plain value) and writes
  `Pulumi.<stack>.yaml` as the real CLI does: KEY is `namespace:key` (the project's name when no namespace);
  with `--path` the rest of KEY is a path of `.name` and `[index]` steps (an index may replace an item or
  append one, no more; a missing level becomes a map or a list), and "true"/"false" and integers are stored
  as booleans and numbers; without `--path` KEY is one key, dots and brackets included, and the value a
  string. VALUE may come on stdin instead (the real CLI reads it there when stdin is not a terminal, one
  trailing newline removed). `--secret` needs the stack's passphrase and stores `{secure: <ciphertext>}` as
  the real CLI does (the stand-in's ciphertext is a digest, never the value).
- `up`, `preview`, `destroy` and `stack output` need the stack (`--stack NAME`, else the selected one) and
  its passphrase; `up` and `destroy` need `--yes` or `--skip-preview` in a non-interactive session. `up` gives
  the stack the outputs in the JSON file `$PULUMI_STUB_OUTPUTS` (what `streamstack render` computes), and
  `stack output NAME` prints them as the real CLI does.

Every invocation is appended to `$PULUMI_STUB_LOG` (JSON lines: argv, cwd, exit status) so that tests can
compare the command sequences of two scripts. A command this stub does not know fails loudly (exit 2).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import yaml

VERSION = "v3.272.0"
FAILED = 255  # the real CLI's exit status on an error
UNSUPPORTED = 2
SALT_PREFIX = "v1:streamstack-stub:"


class CliError(Exception):
    """What the real CLI prints after `error: `."""


def pulumi_home() -> Path:
    configured = os.environ.get("PULUMI_HOME")
    return Path(configured) if configured else Path.home() / ".pulumi"


def read_json(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
    return loaded


def write_json(path: Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, sort_keys=True))


def bucket_folder(url: str) -> Path:
    if not url.startswith("file://"):
        raise CliError(f"the stub knows local backends only (file://...), not {url}")
    raw = url.removeprefix("file://").split("?", 1)[0]
    return Path(os.path.expanduser(raw)).resolve() if raw else Path.home()


def open_bucket(url: str) -> Path:
    folder = bucket_folder(url)
    if not folder.is_dir():
        raise CliError(
            f"unable to open bucket file://{folder}?no_tmp_dir=true: stat {folder}: no such file or directory"
        )
    return folder


def login(arguments: list[str]) -> str:
    urls = [argument for argument in arguments if not argument.startswith("-")]
    if len(urls) != 1 or len(urls) != len(arguments):
        raise CliError(f"the stub takes `pulumi login file://<folder>`, got {arguments}")
    try:
        folder = open_bucket(urls[0])
    except CliError as error:
        raise CliError(f"problem logging in: {error}") from None
    credentials = pulumi_home() / "credentials.json"
    write_json(credentials, {**read_json(credentials), "current": f"file://{folder}"})
    return f"Logged in to {os.uname().nodename} as {os.environ.get('USER', 'runner')} (file://{folder})"


def backend() -> Path:
    current = read_json(pulumi_home() / "credentials.json").get("current")
    if not current:
        raise CliError("PULUMI_ACCESS_TOKEN must be set for login during non-interactive CLI sessions")
    return open_bucket(str(current))


def project() -> tuple[str, Path]:
    start = Path.cwd()
    for directory in (start, *start.parents):
        project_file = directory / "Pulumi.yaml"
        if project_file.is_file():
            for line in project_file.read_text().splitlines():
                if line.startswith("name:"):
                    return line.split(":", 1)[1].strip(), directory
            raise CliError(f"{project_file}: project is missing a 'name' attribute")
    raise CliError(f"no Pulumi.yaml project file found (searching upwards from {start})")


def passphrase() -> str:
    value = os.environ.get("PULUMI_CONFIG_PASSPHRASE", "")
    if value:
        return value
    path = os.environ.get("PULUMI_CONFIG_PASSPHRASE_FILE", "")
    if path:
        try:
            value = Path(path).read_text()
        except OSError as error:
            raise CliError(f"unable to read PULUMI_CONFIG_PASSPHRASE_FILE: {error}") from None
        if value:
            return value
    raise CliError(
        "passphrase must be set with PULUMI_CONFIG_PASSPHRASE or PULUMI_CONFIG_PASSPHRASE_FILE environment "
        "variables"
    )


def salt(phrase: str) -> str:
    return SALT_PREFIX + hashlib.sha256(phrase.encode()).hexdigest()


def incorrect_passphrase() -> CliError:
    return CliError(
        'constructing secrets manager of type "passphrase": incorrect passphrase, please set '
        "PULUMI_CONFIG_PASSPHRASE to the correct passphrase or set PULUMI_CONFIG_PASSPHRASE_FILE to a file "
        "containing the passphrase"
    )


def stack_file(name: str) -> Path:
    project_name, _ = project()
    return backend() / ".pulumi" / "stacks" / project_name / f"{name}.json"


def workspace_file() -> Path:
    _, root = project()
    return pulumi_home() / "workspaces" / f"{hashlib.sha256(str(root).encode()).hexdigest()[:16]}.json"


def create_stack(name: str) -> None:
    path = stack_file(name)
    if path.exists():
        raise CliError(f"stack '{name}' already exists")
    phrase = passphrase()
    _, root = project()
    config = root / f"Pulumi.{name}.yaml"
    lines = config.read_text().splitlines() if config.is_file() else ["config: {}"]
    existing = [line.split(":", 1)[1].strip() for line in lines if line.startswith("encryptionsalt:")]
    if existing and existing[0] != salt(phrase):
        raise incorrect_passphrase()
    if not existing:
        config.write_text("\n".join([f"encryptionsalt: {salt(phrase)}", *lines]) + "\n")
    write_json(path, {"salt": salt(phrase), "outputs": {}, "deployed": False})


def stack_select(arguments: list[str]) -> str:
    names = [argument for argument in arguments if not argument.startswith("-")]
    unknown = [argument for argument in arguments if argument.startswith("-") and argument != "--create"]
    if len(names) != 1 or unknown:
        raise CliError(f"the stub takes `pulumi stack select NAME [--create]`, got {arguments}")
    name = names[0]
    if not stack_file(name).exists():
        if "--create" not in arguments:
            raise CliError(f"no stack named '{name}' found")
        create_stack(name)
    write_json(workspace_file(), {"stack": name})
    return ""


def stack_init(arguments: list[str]) -> str:
    if len(arguments) != 1 or arguments[0].startswith("-"):
        raise CliError(f"the stub takes `pulumi stack init NAME`, got {arguments}")
    create_stack(arguments[0])
    write_json(workspace_file(), {"stack": arguments[0]})
    return f"Created stack '{arguments[0]}'"


def split_options(arguments: list[str], flags: set[str]) -> tuple[str | None, set[str], list[str]]:
    """(--stack value, the flags given, the other arguments); an unknown option fails."""
    stack, given, rest = None, set(), []
    iterator = iter(arguments)
    for argument in iterator:
        if argument in ("--stack", "-s"):
            stack = next(iterator, None)
            if stack is None:
                raise CliError("flag needs an argument: --stack")
        elif argument.startswith("--stack="):
            stack = argument.split("=", 1)[1]
        elif argument in flags:
            given.add(argument)
        elif argument.startswith("-"):
            raise CliError(f"the stub does not know the option {argument}")
        else:
            rest.append(argument)
    return stack, given, rest


def load_stack(name: str | None) -> tuple[Path, dict[str, Any]]:
    if name is None:
        name = read_json(workspace_file()).get("stack")
        if name is None:
            raise CliError("no stack selected; please use `pulumi stack select` to choose one")
    path = stack_file(name)
    if not path.exists():
        raise CliError(f"no stack named '{name}' found")
    state = read_json(path)
    if state["salt"] != salt(passphrase()):
        raise incorrect_passphrase()
    return path, state


def update(command: str, arguments: list[str]) -> str:
    stack, given, rest = split_options(arguments, {"--yes", "-y", "--skip-preview", "-f", "--diff"})
    if rest:
        raise CliError(f"unexpected arguments {rest}")
    path, state = load_stack(stack)
    if command != "preview" and not given & {"--yes", "-y", "--skip-preview", "-f"}:
        raise CliError(
            "--yes or --skip-preview must be passed in to proceed when running in non-interactive mode"
        )
    if command == "up":
        outputs_file = os.environ.get("PULUMI_STUB_OUTPUTS")
        state["outputs"] = read_json(Path(outputs_file)) if outputs_file else {}
        state["deployed"] = True
    elif command == "destroy":
        state["outputs"], state["deployed"] = {}, False
    write_json(path, state)
    return f"{command}: stack {path.stem} done"


def stack_output(arguments: list[str]) -> str:
    stack, given, rest = split_options(arguments, {"--json", "--show-secrets"})
    if len(rest) > 1:
        raise CliError(f"accepts at most 1 arg(s), received {len(rest)}")
    _, state = load_stack(stack)
    outputs: dict[str, Any] = state["outputs"]
    if not rest:
        if "--json" in given:
            return json.dumps(outputs, indent=2)
        return "Current stack outputs ({}):\n{}".format(
            len(outputs),
            "\n".join(f"    {key}  {json.dumps(value)}" for key, value in sorted(outputs.items())),
        )
    if rest[0] not in outputs:
        raise CliError(f"current stack does not have output property '{rest[0]}'")
    value = outputs[rest[0]]
    return json.dumps(value) if "--json" in given or not isinstance(value, str) else value


PATH_STEP = re.compile(r"\.([A-Za-z_][\w-]*)|\[([0-9]+)\]")


def config_path(key: str) -> tuple[str, list[str | int]]:
    """`namespace:top.name[0]` -> (`namespace:top`, ["name", 0]), as `--path` reads a key."""
    top = re.match(r"[^.\[]+", key)
    if top is None:
        raise CliError(f"invalid configuration key: {key!r}")
    steps: list[str | int] = []
    position = top.end()
    while position < len(key):
        step = PATH_STEP.match(key, position)
        if step is None:
            raise CliError(f"invalid --path {key!r} at {key[position:]!r}")
        steps.append(step.group(1) if step.group(1) is not None else int(step.group(2)))
        position = step.end()
    return top.group(0), steps


def path_value(text: str) -> Any:
    if text in ("true", "false"):
        return text == "true"
    return int(text) if re.fullmatch(r"-?[0-9]+", text) else text


def assign(container: Any, step: str | int, value: Any, key: str) -> None:
    if isinstance(step, int):
        if not isinstance(container, list):
            raise CliError(f"{key}: an index into a value that is not a list")
        if step < len(container):
            container[step] = value
        elif step == len(container):
            container.append(value)
        else:
            raise CliError(f"{key}: index {step} is out of range (the list has {len(container)} items)")
    else:
        if not isinstance(container, dict):
            raise CliError(f"{key}: a key into a value that is not a map")
        container[step] = value


def config_set(arguments: list[str]) -> str:
    stack, given, rest = split_options(arguments, {"--path", "--plaintext", "--secret"})
    if len(rest) == 1 and not sys.stdin.isatty():
        text = sys.stdin.read()
        rest.append(text.removesuffix("\n"))
    if len(rest) != 2:
        raise CliError(f"the stub takes `pulumi config set [--path] [--secret] KEY [VALUE]`, got {arguments}")
    key, text = rest
    if stack is None:
        stack = read_json(workspace_file()).get("stack")
        if stack is None:
            raise CliError("no stack selected; please use `pulumi stack select` to choose one")
    if not stack_file(stack).exists():
        raise CliError(f"no stack named '{stack}' found")
    project_name, root = project()
    if "--path" in given:
        top, steps = config_path(key)
        value: Any = path_value(text) if steps else text
    else:
        top, steps, value = key, [], text
    if "--secret" in given:
        load_stack(stack)  # the passphrase that encrypts it, the stack's own
        value = {"secure": "v1:stub:" + hashlib.sha256(text.encode()).hexdigest()}
    if ":" not in top:
        top = f"{project_name}:{top}"
    config_file = root / f"Pulumi.{stack}.yaml"
    document = (yaml.safe_load(config_file.read_text()) if config_file.is_file() else None) or {}
    settings = document.setdefault("config", {}) or {}
    document["config"] = settings
    if not steps:
        settings[top] = value
    else:
        parent: Any = settings
        here: str | int = top
        for step in steps:
            if isinstance(parent, dict):
                child = parent.get(here)
            else:
                child = parent[here] if isinstance(here, int) and here < len(parent) else None
            if child is None:
                child = [] if isinstance(step, int) else {}
                assign(parent, here, child, key)
            parent, here = child, step
        assign(parent, here, value, key)
    config_file.write_text(yaml.safe_dump(document, sort_keys=False))
    return ""


def run(arguments: list[str]) -> str:
    match arguments:
        case ["version"]:
            return VERSION
        case ["login", *rest]:
            return login(rest)
        case ["stack", "select", *rest]:
            return stack_select(rest)
        case ["stack", "init", *rest]:
            return stack_init(rest)
        case ["stack", "output", *rest]:
            return stack_output(rest)
        case ["config", "set", *rest]:
            return config_set(rest)
        case [("up" | "preview" | "destroy") as command, *rest]:
            return update(command, rest)
    raise NotImplementedError(" ".join(arguments))


def main(arguments: list[str]) -> int:
    status = 0
    try:
        printed = run(arguments)
        if printed:
            print(printed)
    except CliError as error:
        print(f"error: {error}", file=sys.stderr)
        status = FAILED
    except NotImplementedError as error:
        print(
            f"pulumi stub: unsupported command `pulumi {error}`; extend tests/pulumi_cli_stub.py",
            file=sys.stderr,
        )
        status = UNSUPPORTED
    log = os.environ.get("PULUMI_STUB_LOG")
    if log:
        with Path(log).open("a") as handle:
            handle.write(json.dumps({"argv": arguments, "cwd": os.getcwd(), "status": status}) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
