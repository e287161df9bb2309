"""The jobs' checkpoint filesystem (jobs/jvm LocalCheckpointFileSystem) against Hadoop's RawLocalFileSystem it
replaces: the same status for files, directories and symbolic links, the same errors, and the permissions it
sets are the file's, all without a child process."""

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


def test_statuses_and_errors_are_hadoops(spark: SparkSession, tmp_path: Path) -> None:
    ours = filesystem(spark, "streamstack.jvm.LocalCheckpointFileSystem")
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
    dangling = path(str(tmp_path / "dangling"))
    assert described(ours.getFileLinkStatus(dangling)) == described(hadoops.getFileLinkStatus(dangling))
    for missing in (dangling, path(str(tmp_path / "missing"))):
        with pytest.raises(Py4JJavaError, match="FileNotFoundException"):
            ours.getFileStatus(missing)
        with pytest.raises(Py4JJavaError, match="FileNotFoundException"):
            hadoops.getFileStatus(missing)


def test_created_files_and_set_permissions_are_on_disk(spark: SparkSession, tmp_path: Path) -> None:
    ours = filesystem(spark, "streamstack.jvm.LocalCheckpointFileSystem")
    hadoops = filesystem(spark, "org.apache.hadoop.fs.RawLocalFileSystem")
    jvm = spark._jvm
    assert jvm is not None
    for name, fs in (("ours", ours), ("hadoops", hadoops)):
        target = jvm.org.apache.hadoop.fs.Path(str(tmp_path / name / "sub" / "file"))
        assert fs.mkdirs(target.getParent())
        stream = fs.create(target, False)
        stream.write(bytearray(b"abc"))
        stream.close()
    assert (tmp_path / "ours" / "sub" / "file").read_bytes() == b"abc"
    for relative in ("sub", "sub/file"):
        mode = stat.S_IMODE(os.stat(tmp_path / "ours" / relative).st_mode)
        assert mode == stat.S_IMODE(os.stat(tmp_path / "hadoops" / relative).st_mode), relative

    permission, path = jvm.org.apache.hadoop.fs.permission.FsPermission, jvm.org.apache.hadoop.fs.Path
    ours.setPermission(path(str(tmp_path / "ours" / "sub" / "file")), permission(0o604))
    assert stat.S_IMODE(os.stat(tmp_path / "ours" / "sub" / "file").st_mode) == 0o604
    with pytest.raises(Py4JJavaError, match="FileNotFoundException"):
        ours.setPermission(path(str(tmp_path / "nothing")), permission(0o600))
