package streamstack.jvm;

import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.FsConstants;
import org.apache.hadoop.fs.FsServerDefaults;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.local.LocalConfigKeys;

/**
 * {@link NioRawLocalFileSystem} for FileContext (the API of Spark's checkpoint file manager), as Hadoop's
 * {@code RawLocalFs} is for RawLocalFileSystem; set as {@code fs.AbstractFileSystem.file.impl}.
 */
public class LocalCheckpointFs extends DelegateToFileSystem {

  public LocalCheckpointFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
    super(uri, new NioRawLocalFileSystem(), conf, FsConstants.LOCAL_FS_URI.getScheme(), false);
  }

  @Override
  public int getUriDefaultPort() {
    return -1; // no port for file:
  }

  @Override
  public FsServerDefaults getServerDefaults(Path path) throws IOException {
    return LocalConfigKeys.getServerDefaults();
  }

  @Override
  @SuppressWarnings("deprecation")
  public FsServerDefaults getServerDefaults() throws IOException {
    return LocalConfigKeys.getServerDefaults();
  }

  @Override
  public boolean isValidName(String src) {
    return true; // any local path, as RawLocalFs
  }
}
