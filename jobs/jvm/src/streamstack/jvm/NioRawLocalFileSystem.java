package streamstack.jvm;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.attribute.PosixFileAttributes;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;
import org.apache.hadoop.fs.FSLinkResolver;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's {@link RawLocalFileSystem} with file permissions and file status read and set through java.nio
 * instead of a child process. Without Hadoop's native library (which neither pyspark nor Spark's images ship),
 * RawLocalFileSystem runs {@code chmod} for every file it creates and {@code readlink} (and {@code ls} when
 * a status's permissions are read) for every status it gives, and Spark's checkpoint file manager asks for
 * several of those per offset, commit and state file: each a fork of the driver or executor JVM, together
 * a large part of a micro-batch's fixed cost (issue 16: a commit log entry took 25-30 ms). The files, their
 * permissions and the write-to-temporary-then-rename of the checkpoint file manager are unchanged. Used
 * through {@link LocalCheckpointFileSystem} (FileSystem) and {@link LocalCheckpointFs} (FileContext).
 */
public class NioRawLocalFileSystem extends RawLocalFileSystem {

  private static final PosixFilePermission[] BITS = {
    PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_READ,
    PosixFilePermission.GROUP_EXECUTE, PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_READ,
    PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_READ,
  };

  @Override
  public void setPermission(Path path, FsPermission permission) throws IOException {
    Set<PosixFilePermission> posix = EnumSet.noneOf(PosixFilePermission.class);
    int mode = permission.toShort();
    for (int bit = 0; bit < BITS.length; bit++) {
      if ((mode & (1 << bit)) != 0) {
        posix.add(BITS[bit]);
      }
    }
    try {
      Files.setPosixFilePermissions(pathToFile(path).toPath(), posix);
    } catch (NoSuchFileException e) {
      throw notFound(path);
    }
  }

  @Override
  public FileStatus getFileStatus(Path path) throws IOException {
    PosixFileAttributes attributes;
    try {
      attributes = Files.readAttributes(pathToFile(path).toPath(), PosixFileAttributes.class);
    } catch (NoSuchFileException e) {
      throw notFound(path);
    }
    int mode = 0;
    for (int bit = 0; bit < BITS.length; bit++) {
      if (attributes.permissions().contains(BITS[bit])) {
        mode |= 1 << bit;
      }
    }
    return new FileStatus(
        attributes.size(),
        attributes.isDirectory(),
        1,
        getDefaultBlockSize(path),
        attributes.lastModifiedTime().toMillis(),
        attributes.lastAccessTime().toMillis(),
        new FsPermission((short) mode),
        attributes.owner().getName(),
        attributes.group().getName(),
        makeQualified(path));
  }

  /**
   * As RawLocalFileSystem's without the native library: a file's or directory's status, or for a symbolic
   * link its target's status as a link (not a directory) with the qualified target path, or an empty one
   * when the target is missing.
   */
  @Override
  public FileStatus getFileLinkStatus(Path path) throws IOException {
    java.nio.file.Path file = pathToFile(path).toPath();
    if (!Files.isSymbolicLink(file)) {
      return getFileStatus(path);
    }
    Path target = new Path(Files.readSymbolicLink(file).toString());
    FileStatus status;
    if (Files.exists(file)) {
      FileStatus targets = getFileStatus(path);
      status =
          new FileStatus(
              targets.getLen(),
              false,
              targets.getReplication(),
              targets.getBlockSize(),
              targets.getModificationTime(),
              targets.getAccessTime(),
              targets.getPermission(),
              targets.getOwner(),
              targets.getGroup(),
              target,
              path);
    } else {
      status = new FileStatus(0, false, 0, 0, 0, 0, FsPermission.getDefault(), "", "", target, path);
    }
    status.setSymlink(FSLinkResolver.qualifySymlinkTarget(getUri(), status.getPath(), status.getSymlink()));
    return status;
  }

  private static FileNotFoundException notFound(Path path) {
    return new FileNotFoundException("File " + path + " does not exist");
  }
}
