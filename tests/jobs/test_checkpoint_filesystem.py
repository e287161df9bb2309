"""The jobs' checkpoint filesystem (jobs/jvm): its raw filesystem (NioRawLocalFileSystem) against Hadoop's
RawLocalFileSystem it replaces, the same status for files, directories and symbolic links, the same errors,
and the permissions it sets are the file's, all without a child process; and the `fs.file.impl` over it
(LocalCheckpointFileSystem), a LocalFileSystem without checksum sidecars that Hadoop's copies accept."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest
from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]
from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark]


def filesystem(spark: SparkSession, class_name: str) -> Any:
    jvm = spark._jvm
    assert jvm is not None
    instance = jvm
    for part in class_name.split("."):
        instance = getattr(instance, part)
    instance = instance()
    instance.initialize(jvm.java.net.URI("file:///"), spark.sparkContext._jsc.hadoopConfiguration())
    return instance


def described(status: Any) -> dict[str, Any]:
    return {
        "length": status.getLen(),
        "directory": status.isDirectory(),
        "symlink": status.getSymlink().toString() if status.isSymlink() else None,
        "permission": status.getPermission().toShort(),
        "owner": status.getOwner(),
        "group": status.getGroup(),
        "modified": status.getModificationTime(),
        "path": status.getPath().toUri().getPath(),
    }


RAW = "streamstack.jvm.NioRawLocalFileSystem"
LOCAL = "streamstack.jvm.LocalCheckpointFileSystem"


def test_statuses_and_errors_are_hadoops(spark: SparkSession, tmp_path: Path) -> None:
    ours = filesystem(spark, RAW)
    local = filesystem(spark, LOCAL)
    hadoops = filesystem(spark, "org.apache.hadoop.fs.RawLocalFileSystem")
    (tmp_path / "file").write_bytes(b"0123456789")
    (tmp_path / "file").chmod(0o640)
    (tmp_path / "directory").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "file")
    (tmp_path / "dangling").symlink_to(tmp_path / "missing")
    path = spark._jvm.org.apache.hadoop.fs.Path  # type: ignore[union-attr]

    for name in ("file", "directory", "link"):
        for method in ("getFileStatus", "getFileLinkStatus"):
            theirs = described(getattr(hadoops, method)(path(str(tmp_path / name))))
            assert described(getattr(ours, method)(path(str(tmp_path / name)))) == theirs, (name, method)
            assert described(getattr(local, method)(path(str(tmp_path / name)))) == theirs, (name, method)
    dangling = path(str(tmp_path / "dangling"))
    assert described(ours.getFileLinkStatus(dangling)) == described(hadoops.getFileLinkStatus(dangling))
    for missing in (dangling, path(str(tmp_path / "missing"))):
        with pytest.raises(Py4JJavaError, match="FileNotFoundException"):
            ours.getFileStatus(missing)
        with pytest.raises(Py4JJavaError, match="FileNotFoundException"):
            hadoops.getFileStatus(missing)


def test_created_files_and_set_permissions_are_on_disk(spark: SparkSession, tmp_path: Path) -> None:
    ours = filesystem(spark, RAW)
    hadoops = filesystem(spark, "org.apache.hadoop.fs.RawLocalFileSystem")
    local = filesystem(spark, LOCAL)
    jvm = spark._jvm
    assert jvm is not None
    for name, fs in (("ours", ours), ("hadoops", hadoops), ("local", local)):
        target = jvm.org.apache.hadoop.fs.Path(str(tmp_path / name / "sub" / "file"))
        assert fs.mkdirs(target.getParent())
        stream = fs.create(target, False)
        stream.write(bytearray(b"abc"))
        stream.close()
    assert (tmp_path / "ours" / "sub" / "file").read_bytes() == b"abc"
    for relative in ("sub", "sub/file"):
        mode = stat.S_IMODE(os.stat(tmp_path / "ours" / relative).st_mode)
        assert mode == stat.S_IMODE(os.stat(tmp_path / "hadoops" / relative).st_mode), relative
    assert sorted(p.name for p in (tmp_path / "local" / "sub").iterdir()) == ["file"], "no .file.crc"

    permission, path = jvm.org.apache.hadoop.fs.permission.FsPermission, jvm.org.apache.hadoop.fs.Path
    ours.setPermission(path(str(tmp_path / "ours" / "sub" / "file")), permission(0o604))
    assert stat.S_IMODE(os.stat(tmp_path / "ours" / "sub" / "file").st_mode) == 0o604
    with pytest.raises(Py4JJavaError, match="FileNotFoundException"):
        ours.setPermission(path(str(tmp_path / "nothing")), permission(0o600))


def test_copies_from_and_to_the_local_filesystem(spark: SparkSession, tmp_path: Path) -> None:
    """Hadoop's copies (RocksDB's snapshot uploads and loads) take the local filesystem as
    `FileSystem.getLocal` gives it, the `fs.file.impl` instance cast to a LocalFileSystem: the jobs' one is
    one, and copies files and directories, keeping or removing the source, without sidecars."""
    jvm = spark._jvm
    assert jvm is not None
    ours = jvm.org.apache.hadoop.fs.FileSystem.getLocal(spark.sparkContext._jsc.hadoopConfiguration())
    assert ours.getClass().getName() == LOCAL
    path = jvm.org.apache.hadoop.fs.Path
    (tmp_path / "source").mkdir()
    (tmp_path / "source" / "a.sst").write_bytes(b"sst")
    (tmp_path / "snapshot.zip").write_bytes(b"zip")
    (tmp_path / "dfs").mkdir()

    ours.copyFromLocalFile(path(str(tmp_path / "snapshot.zip")), path(str(tmp_path / "dfs" / "1.zip")))
    ours.copyFromLocalFile(False, True, path(str(tmp_path / "source")), path(str(tmp_path / "dfs")))
    ours.moveFromLocalFile(path(str(tmp_path / "snapshot.zip")), path(str(tmp_path / "dfs" / "2.zip")))
    ours.copyToLocalFile(path(str(tmp_path / "dfs" / "1.zip")), path(str(tmp_path / "local.zip")))

    files = {str(p.relative_to(tmp_path)): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert files == {
        "source/a.sst": b"sst",
        "dfs/1.zip": b"zip",
        "dfs/2.zip": b"zip",
        "dfs/source/a.sst": b"sst",
        "local.zip": b"zip",
    }
    with pytest.raises(Py4JJavaError, match="already exists"):
        ours.copyFromLocalFile(
            False, False, path(str(tmp_path / "local.zip")), path(str(tmp_path / "dfs" / "1.zip"))
        )
