"""`python -m data_pipeline.download` against a real HTTP server on loopback, serving small files
in the real formats: full, resumed and restarted downloads, checksum mismatch, 404, a refused
connection and a full disk. Every failure ends with a clear message and no file under the final
name."""

from __future__ import annotations

import errno
import hashlib
import io
import pickle
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import h5py
import numpy as np
import pytest

from data_pipeline import download as dl
from data_pipeline import factor_space, render
from data_pipeline.loaders import load_dsprites_npz, load_shapes3d
from data_pipeline.sources import SOURCES, Source, file_checksum, parse_checksum

NPZ = SOURCES["dsprites"].filename


def _dsprites_npz_bytes(n=300) -> bytes:
    """A small dSprites npz in the real layout (0/1 imgs, 6 latent columns, py2-pickled metadata)."""
    space = factor_space("dsprites")
    classes = space.classes_of(np.sort(np.random.default_rng(0).choice(space.n_images, n, replace=False)))
    buffer = io.BytesIO()
    metadata = np.array(pickle.dumps({"title": "dSprites"}, protocol=2), dtype=object)
    np.savez(buffer, imgs=render("dsprites", classes),
             latents_classes=np.concatenate([np.zeros((n, 1), np.int64), classes], axis=1),
             latents_values=np.concatenate([np.ones((n, 1)), space.raw_values(classes)], axis=1),
             metadata=metadata)
    return buffer.getvalue()


def _shapes3d_h5_bytes(path: Path, n=64) -> bytes:
    space = factor_space("shapes3d")
    classes = space.classes_of(np.arange(n))
    with h5py.File(path, "w") as f:
        f.create_dataset("images", data=render("shapes3d", classes),
                         chunks=(n, 4, 4, 1), compression="gzip")
        f["labels"] = space.raw_values(classes)
    return path.read_bytes()


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):
        server = self.server
        server.log.append((self.path, self.headers.get("Range")))
        body = server.files.get(self.path)
        if server.fail_first and len(server.log) <= server.fail_first:
            self.send_error(503, "busy")
            return
        if body is None:
            self.send_error(404, "Not Found")
            return
        start, status = 0, 200
        wanted = self.headers.get("Range")
        if wanted and server.ranges:
            start = 0 if server.ranges == "wrong" else int(wanted.removeprefix("bytes=").split("-")[0])
            if start >= len(body):
                self.send_error(416, "Range Not Satisfiable")
                return
            status = 206
        self.send_response(status)
        self.send_header("Content-Length", str(len(body) - start))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        self.end_headers()
        payload = body[start:]
        if server.drop_after is not None:  # drop this connection halfway, once
            payload, server.drop_after = payload[:server.drop_after], None
            self.wfile.write(payload)
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        server.sent += len(payload)
        self.wfile.write(payload)


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.files, httpd.log, httpd.ranges, httpd.drop_after = {}, [], True, None
    httpd.fail_first, httpd.sent = 0, 0
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    httpd.base = f"http://127.0.0.1:{httpd.server_address[1]}"
    yield httpd
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def npz(server, monkeypatch):
    """The dsprites row of the table pointed at the loopback server, checked by git blob SHA-1
    as the real one is; the payload."""
    body = _dsprites_npz_bytes()
    server.files["/files/" + NPZ] = body
    blob = hashlib.sha1(f"blob {len(body)}\0".encode() + body).hexdigest()
    row = Source("dsprites", NPZ, server.base + "/files/" + NPZ, (("git-blob-sha1", blob),),
                 dataset="dsprites")
    monkeypatch.setitem(SOURCES, "dsprites", row)
    return body


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_full_download_is_verified_renamed_and_loads(server, npz, tmp_path, capsys):
    path = dl.download("dsprites", tmp_path, backoff=0.0)
    assert path == tmp_path / NPZ and path.read_bytes() == npz and _files(tmp_path) == [NPZ]
    data = load_dsprites_npz(data_dir=tmp_path, verify=False)
    assert data.images.shape == (300, 1, 64, 64)
    # stderr is no terminal here: a line as the download starts and one as it ends, no bar frames
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == f"{NPZ}: downloading 1.2 MiB from {server.base}/files/{NPZ}"
    assert re.fullmatch(rf"{NPZ}: 1\.2 MiB in \d+\.\d s, \d+\.\d [KMG]iB/s", lines[1])  # the rate
    assert len(lines) == 2 and "\r" not in "".join(lines)
    # Already there and matching: no second request.
    n_requests = len(server.log)
    assert dl.download("dsprites", tmp_path) == path and len(server.log) == n_requests


def test_an_interrupted_download_resumes_with_range(server, npz, tmp_path):
    half = len(npz) // 2
    server.drop_after = half
    path = dl.download("dsprites", tmp_path, backoff=0.0)
    assert path.read_bytes() == npz
    assert [r for _, r in server.log] == [None, f"bytes={half}-"]
    assert server.sent == len(npz) - half  # the second request sent only the rest


def test_a_server_without_range_support_restarts_from_the_start(server, npz, tmp_path, capsys):
    server.ranges, server.drop_after = False, len(npz) // 3
    path = dl.download("dsprites", tmp_path, backoff=0.0, progress=False)
    assert path.read_bytes() == npz and _files(tmp_path) == [NPZ]
    assert server.sent == len(npz) and len(server.log) == 2
    assert "does not resume downloads" in capsys.readouterr().err


def test_a_range_answer_from_the_wrong_offset_is_dropped_and_fetched_again(server, npz, tmp_path, capsys):
    server.ranges, server.drop_after = "wrong", len(npz) // 2
    assert dl.download("dsprites", tmp_path, backoff=0.0, progress=False).read_bytes() == npz
    assert f"asked for the bytes from {len(npz) // 2:,} but got 'bytes 0-" in capsys.readouterr().err
    assert [r for _, r in server.log] == [None, f"bytes={len(npz) // 2}-", None]


def test_a_complete_partial_file_is_checked_without_fetching_again(server, npz, tmp_path):
    (tmp_path / (NPZ + ".part")).write_bytes(npz)
    assert dl.download("dsprites", tmp_path, progress=False).read_bytes() == npz  # server answers 416
    assert server.sent == 0


def test_a_checksum_mismatch_deletes_the_partial_file_and_says_both_digests(server, npz, tmp_path):
    expected = "0" * 32
    with pytest.raises(dl.DownloadError) as caught:
        dl.download("dsprites", tmp_path, sha=f"md5:{expected}", progress=False)
    message = str(caught.value)
    assert f"expected {expected}" in message and f"found {hashlib.md5(npz).hexdigest()}" in message
    assert "partial file was deleted" in message and _files(tmp_path) == []


def test_a_corrupted_transfer_never_reaches_the_final_name(server, npz, tmp_path):
    server.files["/files/" + NPZ] = npz[:-10] + b"x" * 10
    with pytest.raises(dl.DownloadError, match="git-blob-sha1: expected"):
        dl.download("dsprites", tmp_path, progress=False)
    assert _files(tmp_path) == []


def test_http_404_is_not_retried_and_names_the_url(server, tmp_path, monkeypatch):
    monkeypatch.setenv("DISGEN_MIRROR", server.base + "/mirror/")
    with pytest.raises(dl.DownloadError) as caught:
        dl.download("3dshapes", tmp_path, backoff=0.0, progress=False)
    assert f"{server.base}/mirror/3dshapes.h5: HTTP 404" in str(caught.value)
    assert len(server.log) == 1 and _files(tmp_path) == []


def test_transient_server_errors_are_retried_with_a_mirror(server, tmp_path, monkeypatch, capsys):
    body = _shapes3d_h5_bytes(tmp_path / "source.h5")
    server.files["/mirror/3dshapes.h5"], server.fail_first = body, 2
    monkeypatch.setenv("DISGEN_MIRROR", server.base + "/mirror")
    out = tmp_path / "data"
    path = dl.download("3dshapes", out, sha=f"sha256:{hashlib.sha256(body).hexdigest()}", backoff=0.0,
                       progress=False)
    assert "HTTP 503" in capsys.readouterr().err and len(server.log) == 3
    assert load_shapes3d(path, verify=False).images.shape == (64, 3, 64, 64)


def test_a_refused_connection_gives_up_after_the_retries_naming_the_url(tmp_path):
    with socket.socket() as probe:  # a port with nothing listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/mpi3d_toy.npz"
    with pytest.raises(dl.DownloadError) as caught:
        dl.download("mpi3d_toy", tmp_path, url=url, retries=2, backoff=0.0, progress=False)
    message = str(caught.value)
    assert message.startswith(url) and "refused" in message.lower() and "after 3 tries" in message
    assert "online" in message and "DISGEN_MIRROR" in message and _files(tmp_path) == []


def test_a_full_disk_stops_with_a_message_and_the_next_run_resumes(server, npz, tmp_path, monkeypatch):
    real_open = open

    class FullDisk:
        def __init__(self, handle):
            self.handle, self.written = handle, 0

        def write(self, block):
            if self.written + len(block) > 1000:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.written += len(block)
            return self.handle.write(block)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

    monkeypatch.setattr(dl, "BLOCK", 500)
    monkeypatch.setattr(dl, "open", lambda *a, **k: FullDisk(real_open(*a, **k)), raising=False)
    with pytest.raises(dl.DownloadError) as caught:
        dl.download("dsprites", tmp_path, backoff=0.0, progress=False)
    assert "no space left" in str(caught.value) and "1,000 bytes already saved" in str(caught.value)
    assert _files(tmp_path) == [NPZ + ".part"]  # never under the final name
    monkeypatch.setattr(dl, "open", real_open, raising=False)
    assert dl.download("dsprites", tmp_path, progress=False).read_bytes() == npz
    assert server.log[-1][1] == "bytes=1000-"


def test_an_existing_file_that_does_not_match_is_left_alone(server, npz, tmp_path):
    (tmp_path / NPZ).write_bytes(b"something else")
    with pytest.raises(dl.DownloadError, match="exists but does not match"):
        dl.download("dsprites", tmp_path, progress=False)
    assert (tmp_path / NPZ).read_bytes() == b"something else" and server.log == []


def test_the_command_line(server, npz, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DISGEN_DATA", str(tmp_path))
    dl.main(["dsprites", "--quiet"])
    assert f"{tmp_path / NPZ} ({len(npz):,} bytes, checksum verified)" in capsys.readouterr().out
    dl.main(["--list"])
    listing = capsys.readouterr().out
    assert all(name in listing for name in SOURCES) and "[present]" in listing and "[absent]" in listing
    # a file of one's own: --url and --sha
    server.files["/own/mine.bin"] = b"0123456789"
    dl.main(["mine", "--url", server.base + "/own/mine.bin", "--sha",
             hashlib.sha256(b"0123456789").hexdigest(), "--to", str(tmp_path / "own"), "--quiet"])
    assert (tmp_path / "own" / "mine.bin").read_bytes() == b"0123456789"
    bad = [(["nope"], "unknown dataset file 'nope'"), (["dsprites", "--sha", "md5:12"], "32 hex"),
           ([], "which file")]
    for argv, expected in bad:
        with pytest.raises(SystemExit) as code:
            dl.main(argv)
        assert code.value.code == 2 and expected in capsys.readouterr().err
    server.files.clear()
    (tmp_path / NPZ).unlink()
    with pytest.raises(SystemExit) as code:
        dl.main(["dsprites", "--quiet", "--retries", "0"])
    assert code.value.code == 1 and "HTTP 404" in capsys.readouterr().err


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_on_a_terminal_the_progress_is_a_bar_with_bytes_rate_and_time_left():
    stream = Terminal()
    bar = dl.Progress("f.npz", "http://x/f.npz", total=10 << 20, done=2 << 20, stream=stream)
    bar.update(3 << 20)
    bar.close()
    text = stream.getvalue()
    assert "\r" in text and "f.npz:" in text  # a bar redrawn in place, not a line per frame
    frame = text.rsplit("\r", 1)[-1]
    assert re.search(r" 50%\|.*\| 5\.00M/10\.0M \[.*<.*\]", frame), frame  # bytes of the total, time left
    assert "downloading" not in text


def test_off_a_terminal_a_resumed_download_says_where_it_resumed_and_what_it_got():
    stream = io.StringIO()
    bar = dl.Progress("f.npz", "http://x/f.npz", total=10 << 20, done=4 << 20, stream=stream)
    bar.update(4 << 20)
    bar.close()
    start, end = stream.getvalue().splitlines()
    assert start == "f.npz: downloading 10.0 MiB from http://x/f.npz, resuming after 4.0 MiB"
    assert end.startswith("f.npz: 4.0 MiB in ") and end.endswith("/s (8.0 MiB of 10.0 MiB)")


def test_checksums_git_blob_form_and_parsing(tmp_path):
    (tmp_path / "f").write_bytes(b"hello")
    assert file_checksum(tmp_path / "f", "git-blob-sha1") == "b6fc4c620b67d95f953a5c1c1230aaab5db5a1b0"  # git
    assert parse_checksum("5D41402ABC4B2A76B9719D911017C592") == ("md5", "5d41402abc4b2a76b9719d911017c592")
    with pytest.raises(ValueError, match="ALGO:HEX"):
        parse_checksum("crc32:1234")


def test_the_table_holds_the_published_sources():
    expected = {
        "dsprites": ("git-blob-sha1", "d98996d3f8ee1550e06b9d4ed78d0beb478910d5"),
        "dsprites_hdf5": ("md5", "b331c4447a651c44bf5e8ae09022e230"),
        "3dshapes": ("md5", "099a2078d58cec4daad0702c55d06868"),
        "mpi3d_toy": ("md5", "55889cb7c7dfc655d6e0277beee88868"),
        "mpi3d_realistic": ("md5", "59a6225b88b635365f70c91b3e52f70f"),
        "mpi3d_real": ("md5", "0f33f609918fb5c97996692f91129802"),
    }
    for name, checksum in expected.items():
        assert checksum in SOURCES[name].checksums
        assert all(url.endswith("/" + SOURCES[name].filename) for url in SOURCES[name].urls)
    assert ("git-blob-sha1", "3c8de5d40afa425dfd9de811d71248449aae238b") in SOURCES["dsprites_hdf5"].checksums


def test_a_missing_real_file_error_prints_the_download_command(tmp_path, monkeypatch):
    from sweeps.data import real_file as load_real_file
    from sweeps.errors import UsageError

    monkeypatch.delenv("DISGEN_DATA", raising=False)
    for dataset, name in [("dsprites", "dsprites"), ("shapes3d", "3dshapes"), ("mpi3d", "mpi3d_toy")]:
        with pytest.raises(UsageError) as caught:
            load_real_file(dataset, str(tmp_path))
        command = f"python -m data_pipeline.download {name} --to {tmp_path}"
        assert f"download it with: {command} " in str(caught.value)
        assert "\n" not in str(caught.value)
    with pytest.raises(UsageError, match="--to data and pass --data-dir data"):
        load_real_file("shapes3d", None)
    monkeypatch.setenv("DISGEN_DATA", str(tmp_path / "env"))
    with pytest.raises(UsageError, match=f"download 3dshapes --to {tmp_path / 'env'} "):
        load_real_file("shapes3d", None)


def test_a_study_missing_several_real_files_names_them_all_at_once_before_ray(tmp_path, monkeypatch, capsys):
    """montero2021 reads dSprites and 3DShapes: one error names both files and both downloads (the
    check runs in the plan, before Ray: --dry-run shows it too)."""
    from sweeps.paper_grid import main

    monkeypatch.delenv("DISGEN_DATA", raising=False)
    for argv in (["--dry-run"], ["--storage-path", str(tmp_path / "results")]):
        assert main(["--preset", "montero2021", "--scale", "small", "--data-dir", str(tmp_path), *argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        assert "2 datasets this study reads are missing" in err
        dsprites = "dsprites_ndarray_co1sh3sc6or40x32y32_64x64"
        assert f"{dsprites}.npz (or {dsprites}.hdf5) not found in {tmp_path}" in err
        assert f"3dshapes.h5 not found in {tmp_path}" in err
        assert err.rstrip().endswith(f"run: python -m data_pipeline.download dsprites --to {tmp_path} && "
                                     f"python -m data_pipeline.download 3dshapes --to {tmp_path}"), err
    # no folder given: the downloads go to ./data, and the sweep is told where they are
    assert main(["--preset", "montero2021", "--scale", "small", "--data-source", "real", "--dry-run"]) == 2
    assert capsys.readouterr().err.rstrip().endswith(
        "python -m data_pipeline.download 3dshapes --to data and pass --data-dir data")


def test_mpi3d_comes_from_the_maintainers_new_address_with_the_old_one_as_a_mirror(capsys):
    # moved in 2024 (rr-learning/disentanglement_dataset, issue 4); the checksums name the bytes
    for name in ("mpi3d_toy", "mpi3d_realistic", "mpi3d_real"):
        row = SOURCES[name]
        assert row.urls == (f"https://storage.googleapis.com/mpi3d_disentanglement_dataset/data/{name}.npz",
                            f"https://storage.googleapis.com/disentanglement_dataset/Final_Dataset/{name}.npz")
    dl.main(["--list", "--to", "nowhere"])
    listing = capsys.readouterr().out
    assert "mpi3d_disentanglement_dataset/data/mpi3d_toy.npz\n" in listing
    assert "Final_Dataset/mpi3d_toy.npz (mirror)" in listing


def test_the_addresses_are_tried_in_order_until_one_serves_the_right_bytes(server, npz, tmp_path,
                                                                           monkeypatch, capsys):
    # the first address is gone (404), the second serves other bytes, the third the file itself
    server.files["/wrong/" + NPZ] = b"not the file"
    row = SOURCES["dsprites"]
    urls = [server.base + "/gone/" + NPZ, server.base + "/wrong/" + NPZ, server.base + "/files/" + NPZ]
    monkeypatch.setitem(SOURCES, "dsprites", Source(row.name, NPZ, urls[0], row.checksums, dataset="dsprites",
                                                     mirrors=tuple(urls[1:])))
    path = dl.download("dsprites", tmp_path, backoff=0.0, progress=False)
    assert path.read_bytes() == npz and _files(tmp_path) == [NPZ]
    assert [p for p, _ in server.log] == ["/gone/" + NPZ, "/wrong/" + NPZ, "/files/" + NPZ]
    err = capsys.readouterr().err
    assert f"{urls[0]}: HTTP 404" in err and f"trying the next address of dsprites: {urls[1]}" in err
    assert f"{urls[1]}: the downloaded file does not match its checksum" in err


def test_when_every_address_fails_the_error_names_each(server, tmp_path, monkeypatch):
    row = SOURCES["mpi3d_toy"]
    urls = [server.base + "/a/mpi3d_toy.npz", server.base + "/b/mpi3d_toy.npz"]
    monkeypatch.delenv("DISGEN_MIRROR", raising=False)
    monkeypatch.setitem(SOURCES, "mpi3d_toy", Source(row.name, row.filename, urls[0], row.checksums,
                                                      dataset="mpi3d", mirrors=(urls[1],)))
    with pytest.raises(dl.DownloadError) as caught:
        dl.download("mpi3d_toy", tmp_path, backoff=0.0, progress=False)
    message = str(caught.value)
    assert message.startswith("no address of mpi3d_toy worked: ")
    assert f"{urls[0]}: HTTP 404" in message and f"{urls[1]}: HTTP 404" in message
    assert _files(tmp_path) == []


def test_the_usage_line_names_the_module_command(capsys):
    with pytest.raises(SystemExit):
        dl.main(["--help"])
    assert capsys.readouterr().out.startswith("usage: python -m data_pipeline.download ")
