package streamstack.jvm;

import org.apache.hadoop.fs.LocalFileSystem;

/**
 * The jobs' {@code fs.file.impl}: Hadoop's {@link LocalFileSystem} over {@link NioRawLocalFileSystem}, neither
 * writing nor verifying {@code .<name>.crc} checksum sidecars (the default writes and renames one beside every
 * offset, commit and state file). A LocalFileSystem, not the raw filesystem itself, because Hadoop hands out
 * the {@code fs.file.impl} instance as one ({@code FileSystem.getLocal} casts it): RocksDB's state store
 * uploads and loads its snapshots through {@code copyFromLocalFile} and {@code copyToLocalFile}, which get the
 * local filesystem that way, and with the raw filesystem its snapshot maintenance failed on the cast and only
 * logged it, so no snapshot was ever written and every restart replayed all changelogs.
 */
public class LocalCheckpointFileSystem extends LocalFileSystem {

  public LocalCheckpointFileSystem() {
    super(new NioRawLocalFileSystem());
    setWriteChecksum(false);
    setVerifyChecksum(false);
  }
}
