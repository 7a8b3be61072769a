"""Where a warehouse or run folder lives, told to each reader in its own words.

One location (a plain path, or an `s3a://`, `s3://`, `gs://`, `abfss://` or `dbfs:/` URI) is read
by three kinds of client: Spark through Hadoop's filesystems (settings under `spark.hadoop.`),
delta-rs through its storage options, and pyarrow through a filesystem object and a path. These
functions translate one location and one set of S3 settings into each of those; they are pure
(nothing is opened or contacted) except `arrow_filesystem`, which builds the pyarrow object.

Credentials for gs:// and abfss:// come from the environment the cluster gives every node (its
service account or managed identity); only S3 needs explicit settings here, because an
S3-compatible server other than AWS (a test server on localhost, MinIO) needs an endpoint.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from corpusgraph.config import S3Section, StorageSection

__all__ = ["Location", "parse", "uses_s3", "spark_hadoop_conf", "delta_storage_options",
           "delta_uri", "arrow_filesystem", "join", "is_local", "local_path", "node_path", "remove_tree",
           "spark_uri", "open_delta", "list_files", "download", "upload"]

# Schemes that name the same S3 store: Hadoop's connector is s3a; s3 is what AWS tools and EMR write.
S3_SCHEMES = ("s3a", "s3")
SCHEMES = (*S3_SCHEMES, "gs", "abfss", "dbfs", "file")


def _ssl(s3: S3Section) -> bool:
    return not (s3.endpoint or "").startswith("http://")


def _keys(s3: S3Section) -> tuple[str, str] | None:
    """(access key, secret key) when the section names both; None: the environment's."""
    if s3.access_key and s3.secret_key:
        return s3.access_key, s3.secret_key.get_secret_value()
    return None


@dataclass(frozen=True)
class Location:
    """A location split into scheme ('' for a plain path), authority (bucket, container@account) and path."""

    scheme: str
    authority: str
    path: str  # no leading slash for object stores; the whole path for plain and dbfs locations

    @property
    def is_s3(self) -> bool:
        return self.scheme in S3_SCHEMES

    @property
    def local(self) -> bool:
        return self.scheme in ("", "file")


def parse(location: str) -> Location:
    """Split a location; a clear error for a scheme none of the three clients is set up for here."""
    if "://" not in location and not location.startswith("dbfs:"):
        return Location("", "", location)
    url = urlparse(location)
    scheme = url.scheme.lower()
    if scheme not in SCHEMES:
        raise ValueError(f"unsupported storage scheme {scheme!r} in {location!r}; expected one of {SCHEMES} "
                         "or a plain path")
    if scheme in ("dbfs", "file"):
        return Location(scheme, "", url.path or "/")
    if not url.netloc:
        raise ValueError(f"{location!r} names no bucket or container")
    return Location(scheme, url.netloc, url.path.lstrip("/"))


def uses_s3(storage: StorageSection) -> bool:
    """Whether a run reaches an S3 store (Spark then needs the s3a connector): a location of the
    section is on S3, or its s3 names an endpoint or keys (for inputs read from S3)."""
    return bool(storage.s3.endpoint or storage.s3.access_key) or any(parse(loc).is_s3 for loc in storage.locations())


def spark_hadoop_conf(s3: S3Section) -> dict[str, str]:
    """Spark settings that point Hadoop's s3a connector (and s3:// paths) at the store.

    Without keys, the connector's default chain (environment, instance profile) finds them.
    """
    prefix = "spark.hadoop.fs.s3a."
    conf = {
        # s3:// resolves to a connector only on EMR; elsewhere it is the same store through s3a.
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        prefix + "endpoint.region": s3.region,
        prefix + "path.style.access": str(s3.path_style).lower(),
        prefix + "connection.ssl.enabled": str(_ssl(s3)).lower(),
    }
    if s3.endpoint:
        conf[prefix + "endpoint"] = s3.endpoint
    if keys := _keys(s3):
        conf[prefix + "aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        conf[prefix + "access.key"], conf[prefix + "secret.key"] = keys
    return conf


def delta_storage_options(location: str, s3: S3Section | None = None) -> dict[str, str]:
    """delta-rs storage options for reading a table at location (empty where none are needed)."""
    loc = parse(location)
    if not loc.is_s3 or s3 is None:
        return {}
    opts = {"AWS_REGION": s3.region, "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": str(not s3.path_style).lower()}
    if s3.endpoint:
        opts["AWS_ENDPOINT_URL"] = s3.endpoint
        if not _ssl(s3):
            opts["AWS_ALLOW_HTTP"] = "true"
    if keys := _keys(s3):
        opts["AWS_ACCESS_KEY_ID"], opts["AWS_SECRET_ACCESS_KEY"] = keys
    return opts


def delta_uri(location: str) -> str:
    """The location for delta-rs: dbfs:/ as the /dbfs mount every node has, s3a:// as s3:// (delta-rs
    takes both; s3:// is the one every S3 client knows), anything else as it is."""
    loc = parse(location)
    if loc.is_s3:
        return f"s3://{loc.authority}/{loc.path}"
    if loc.scheme == "dbfs":
        return "/dbfs" + loc.path
    if loc.scheme == "file":
        return loc.path
    return location


def arrow_filesystem(location: str, s3: S3Section | None = None, *, create_buckets: bool = False):
    """A pyarrow filesystem and the path inside it for location.

    create_buckets: S3 only; lets create_dir make a bucket (off by default, as in pyarrow).
    """
    from pyarrow import fs

    loc = parse(location)
    if loc.is_s3:
        s3 = s3 or S3Section()
        kwargs = {"region": s3.region, "force_virtual_addressing": not s3.path_style,
                  "allow_bucket_creation": create_buckets}
        if s3.endpoint:
            url = urlparse(s3.endpoint)
            kwargs.update(endpoint_override=url.netloc, scheme=url.scheme or "https")
        if keys := _keys(s3):
            kwargs.update(access_key=keys[0], secret_key=keys[1])
        return fs.S3FileSystem(**kwargs), f"{loc.authority}/{loc.path}".rstrip("/")
    if loc.scheme == "gs":
        return fs.GcsFileSystem(), f"{loc.authority}/{loc.path}".rstrip("/")
    if loc.scheme == "abfss":
        container, _, host = loc.authority.partition("@")
        return fs.AzureFileSystem(account_name=host.split(".", 1)[0]), f"{container}/{loc.path}".rstrip("/")
    return fs.LocalFileSystem(), local_path(delta_uri(location))


def is_local(location: str) -> bool:
    """A plain path or file: URI (dbfs:/ counts as remote: Spark reads it through Hadoop)."""
    return parse(str(location)).local


def local_path(location: str) -> str:
    """A local location as an absolute path (relative ones against the working folder); other
    locations unchanged."""
    loc = parse(str(location))
    return str(Path(loc.path).resolve()) if loc.local else str(location)


def join(location: str, *parts: str) -> str:
    """location/part/...: a path join for plain paths, a '/' join for URIs."""
    if is_local(location):
        return str(Path(local_path(location), *parts))
    return "/".join([str(location).rstrip("/"), *(p.strip("/") for p in parts)])


def spark_uri(location: str) -> str:
    """The location as Spark's Hadoop filesystems take it: s3:// as s3a:// (s3:// has a connector
    only on EMR), plain paths absolute, anything else as it is."""
    loc = parse(str(location))
    if loc.is_s3:
        return f"s3a://{loc.authority}/{loc.path}"
    return local_path(location)


def node_path(template: str) -> str:
    """A node-local folder from its configured form: $VAR and ${VAR} expanded with this process's
    environment (so each node of a cluster can put it elsewhere), then made absolute."""
    return str(Path(os.path.expandvars(str(template))).resolve())


def remove_tree(location: str, s3: S3Section | None = None) -> None:
    """Delete a folder (or prefix) and everything under it; nothing when it is not there."""
    from pyarrow import fs as pafs

    filesystem, path = arrow_filesystem(location, s3)
    try:
        info = filesystem.get_file_info(path)
    except OSError:
        return
    if info.type == pafs.FileType.Directory:
        filesystem.delete_dir(path)
    elif info.type == pafs.FileType.File:
        filesystem.delete_file(path)


# -- JVM-free readers and writers: a Delta table opened by delta-rs, whole files through pyarrow --

def open_delta(location: str, s3: S3Section | None = None, **kwargs):
    """deltalake's DeltaTable for the table at location (a folder or a URI), with the storage
    options its store needs; kwargs go to DeltaTable (version=...). TableNotFoundError as delta-rs
    raises it.

    s3 left at its defaults (an unconfigured storage.s3) passes no options, so delta-rs takes
    every setting from the environment (AWS_ENDPOINT_URL, AWS_REGION, keys), as the section's
    defaults promise; the defaults' region and addressing would otherwise override those."""
    from deltalake import DeltaTable

    if s3 == S3Section():
        s3 = None
    return DeltaTable(delta_uri(location), storage_options=delta_storage_options(location, s3) or None, **kwargs)


def list_files(location: str, s3: S3Section | None = None) -> list[str]:
    """Names of the files directly under a folder or prefix, sorted; [] when it is not there."""
    from pyarrow import fs as pafs

    filesystem, path = arrow_filesystem(location, s3)
    found = filesystem.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    return sorted(info.base_name for info in found if info.type == pafs.FileType.File)


def download(location: str, local: str | os.PathLike[str], s3: S3Section | None = None) -> None:
    """Copy one file from location to a local path (its folder must exist). FileNotFoundError when
    location is not there."""
    from pyarrow import fs as pafs

    filesystem, path = arrow_filesystem(location, s3)
    if filesystem.get_file_info(path).type != pafs.FileType.File:
        raise FileNotFoundError(f"{location} is not there")
    pafs.copy_files(path, str(Path(local).resolve()), source_filesystem=filesystem,
                    destination_filesystem=pafs.LocalFileSystem())


def upload(local: str | os.PathLike[str], location: str, s3: S3Section | None = None) -> None:
    """Copy one local file to location, replacing what is there. An object store shows a reader
    the old object or the new one, never a part."""
    from pyarrow import fs as pafs

    filesystem, path = arrow_filesystem(location, s3)
    parent = path.rsplit("/", 1)[0]
    if parent and not parse(location).is_s3:  # S3 has no folders to make; other stores may
        filesystem.create_dir(parent, recursive=True)
    pafs.copy_files(str(Path(local).resolve()), path, source_filesystem=pafs.LocalFileSystem(),
                    destination_filesystem=filesystem)
