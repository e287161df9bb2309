"""Build the jobs' JVM jar: `python -m jobs.jvm.build [--out JAR] [--spark-jars DIR]`.

Compiles `jobs/jvm/src` with the machine's JDK 17 (`javac --release 17`, `jar`) against the jars of the
installed pyspark (or `--spark-jars`), into the local cache (or `--out`); `--image` is the jobs image's
build (jobs/Dockerfile), into Spark's jars folder there. Nothing is downloaded. The jar is rebuilt only when a
source is newer than it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from jobs.jvm import IMAGE_JAR, SOURCES, local_jar


def pyspark_jars() -> Path:
    import pyspark  # noqa: PLC0415 -- only here: the image's build passes --spark-jars, without pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def _tool(name: str) -> str:
    """A JDK tool from JAVA_HOME when that is a JDK, else from PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.access(Path(java_home) / "bin" / name, os.X_OK):
        return str(Path(java_home) / "bin" / name)
    found = shutil.which(name)
    if found is None:
        raise SystemExit(f"error: `{name}` not found; building the jobs' JVM jar needs a JDK 17 on PATH")
    return found


def build_jar(out: Path | None = None, spark_jars: Path | None = None, *, force: bool = False) -> Path:
    """The jar at `out` (default `local_jar()`), built if it is missing or older than a source."""
    jar = out or local_jar()
    sources = sorted(SOURCES.rglob("*.java"))
    if not force and jar.exists() and all(s.stat().st_mtime <= jar.stat().st_mtime for s in sources):
        return jar
    classpath = str((spark_jars or pyspark_jars()) / "*")
    jar.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="streamstack-jvm-") as work:
        classes = Path(work) / "classes"
        subprocess.run(
            [
                _tool("javac"),
                "--release",
                "17",
                "-Xlint:all,-path",
                "-Werror",
                "-cp",
                classpath,
                "-d",
                str(classes),
                *map(str, sources),
            ],
            check=True,
        )
        staged = Path(work) / jar.name
        subprocess.run([_tool("jar"), "--create", "--file", str(staged), "-C", str(classes), "."], check=True)
        staged.replace(jar)
    return jar


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=None, help="the jar to write (default: the local cache)")
    parser.add_argument("--spark-jars", type=Path, default=None, help="Spark's jars (default: pyspark's)")
    parser.add_argument("--force", action="store_true", help="rebuild even when the jar is up to date")
    parser.add_argument(
        "--image",
        action="store_true",
        help=f"the jobs image's build: into {IMAGE_JAR}, against the Spark jars there",
    )
    args = parser.parse_args(argv)
    if args.image:
        args.out, args.spark_jars = Path(IMAGE_JAR), Path(IMAGE_JAR.parent)
    print(build_jar(args.out, args.spark_jars, force=args.force))
    return 0


if __name__ == "__main__":
    sys.exit(main())
