"""On S3 every folder key pyarrow writes (an empty ``…/`` object) is a new object version on a versioned
bucket, kept for the bucket's noncurrent-version days: disgen's file system (``analysis.storage.
s3_filesystem``, which Tune is also given) writes a folder's key only where there is none, so
uploading into one folder again and again leaves one version of each folder key, as from_uri's
plain file system does not."""

import pyarrow.fs as pafs
from conftest import S3_BUCKET

from analysis import storage


def _folder_key_versions(prefix: str) -> dict[str, int]:
    import boto3

    s3 = boto3.session.Session().client("s3")
    versions = s3.list_object_versions(Bucket=S3_BUCKET, Prefix=prefix).get("Versions", [])
    counts: dict[str, int] = {}
    for version in versions:
        if version["Key"].endswith("/"):
            counts[version["Key"]] = counts.get(version["Key"], 0) + 1
    return counts


def _upload_three_times(filesystem, prefix: str) -> None:
    """As a trial's uploads do: the folder made, then files put into it, three times over."""
    for round_ in range(3):
        filesystem.create_dir(f"{S3_BUCKET}/{prefix}/trial/checkpoint", recursive=True)
        with filesystem.open_output_stream(f"{S3_BUCKET}/{prefix}/trial/checkpoint/part-{round_}") as out:
            out.write(b"weights")


def test_each_folder_key_is_written_once_however_often_files_go_into_it(s3_server):
    import boto3

    boto3.session.Session().client("s3").put_bucket_versioning(
        Bucket=S3_BUCKET, VersioningConfiguration={"Status": "Enabled"})
    filesystem, _ = storage.resolve(f"s3://{S3_BUCKET}/exp")
    _upload_three_times(filesystem, "disgen")
    assert _folder_key_versions("disgen/") == {
        "disgen/": 1, "disgen/trial/": 1, "disgen/trial/checkpoint/": 1}
    # the control: pyarrow's file system as from_uri makes it writes each folder key at every upload
    plain, _ = pafs.FileSystem.from_uri(f"s3://{S3_BUCKET}?allow_delayed_open=true")
    _upload_three_times(plain, "plain")
    assert all(count >= 3 for count in _folder_key_versions("plain/").values())
    assert filesystem.get_file_info(f"{S3_BUCKET}/disgen/trial/checkpoint/part-2").size == len(b"weights")
