"""Where an experiment lives: a local folder or an object-store URI such as ``s3://bucket/prefix``.

Everything that touches the experiment folder goes through pyarrow's file systems, the same layer
Ray Tune uses for its own storage, so a local path and ``s3://`` behave alike. For an
S3-compatible server other than AWS, set ``AWS_ENDPOINT_URL`` (and the usual ``AWS_*`` keys).
"""

from __future__ import annotations

import os
import uuid

import pyarrow.fs as pafs

# Where a remote store is; passed on to Ray's workers. Never its credentials: a runtime
# environment is shown by the dashboard. On AWS, nodes get theirs from an instance profile
# (cluster/iam); a local Ray's workers inherit the driver's environment.
STORAGE_ENVIRONMENT = ("AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION", "AWS_REGION")


def is_remote(path: str) -> bool:
    return "://" in path


def join(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *parts]) if is_remote(base) else os.path.join(base, *parts)


def resolve(path: str) -> tuple[pafs.FileSystem, str]:
    """(file system, path inside it) of a local path or URI."""
    if is_remote(path):
        return pafs.FileSystem.from_uri(path)
    return pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(path))


def normalise(path: str) -> str:
    """A local path made absolute; a URI unchanged (without a trailing slash)."""
    return path.rstrip("/") if is_remote(path) else os.path.abspath(os.path.expanduser(path))


def check_writable(path: str) -> None:
    """Create ``path`` and write and delete a probe file there; raise OSError if that fails."""
    fs, inner = resolve(path)
    fs.create_dir(inner, recursive=True)
    probe = f"{inner}/.disgen-write-test-{uuid.uuid4().hex}"
    with fs.open_output_stream(probe) as stream:
        stream.write(b"ok")
    fs.delete_file(probe)


def exists(path: str) -> bool:
    fs, inner = resolve(path)
    return fs.get_file_info(inner).type != pafs.FileType.NotFound


def list_names(path: str) -> list[str]:
    """Names directly inside a folder (empty if it does not exist)."""
    fs, inner = resolve(path)
    if fs.get_file_info(inner).type == pafs.FileType.NotFound:
        return []
    return [os.path.basename(info.path) for info in fs.get_file_info(pafs.FileSelector(inner))]


def worker_environment() -> dict[str, str]:
    """The storage-related environment of this process, to hand to Ray's workers."""
    return {name: os.environ[name] for name in STORAGE_ENVIRONMENT if name in os.environ}


def download_if_exists(source: str, local_path: str) -> bool:
    """Copy ``source`` (a path or URI) to a local file; False if there is nothing there."""
    fs, inner = resolve(source)
    if fs.get_file_info(inner).type == pafs.FileType.NotFound:
        return False
    pafs.copy_files(inner, local_path, source_filesystem=fs, destination_filesystem=pafs.LocalFileSystem())
    return True


def upload(local_path: str, destination: str) -> None:
    fs, inner = resolve(destination)
    pafs.copy_files(local_path, inner, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)
