"""Keeping a build's checkout and starting sandboxes from it, on real providers: what an
agent does in a sandbox started from a build never reaches the build, and what install
left (links out of the checkout, FIFOs, hard links) is kept as it is, never followed."""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from pathlib import Path

import pytest
from sandbox_helpers import image_removed, spec_for

from sandbox import snapshots
from sandbox.provider import REPO_DIR

# What an install step may leave: a dependency, a hard link to it, a link to a host file
# outside the checkout, and a FIFO that would block a reader that opened it.
INSTALL = ("mkdir -p repo/.deps && echo pristine > repo/.deps/lib.py "
           "&& ln repo/.deps/lib.py repo/.deps/same.py && ln -s /etc/hostname repo/out "
           "&& mkfifo repo/pipe")
# An agent changing the checkout every way it can: in place, through the hard link,
# modes, deletion, and writing through the link to the host file.
AGENT = ("echo agent >> .deps/lib.py; echo agent > .deps/same.py; chmod 600 .deps/lib.py; "
         "rm -f pipe; mkdir -p .deps/new && echo new > .deps/new/file; "
         "echo agent > out 2>/dev/null; true")
LOOK = ("cat .deps/lib.py; stat -c '%h %a' .deps/lib.py; readlink out; "
        "[ -p pipe ] && echo fifo; [ -e .deps/new ] || echo no-new")


async def _sh(provider, sb, script: str, cwd: str = "/workspace") -> str:
    result = await provider.run(sb, ["sh", "-c", script], cwd=cwd, timeout=120)
    assert result.exit_code == 0, result.output
    return result.output


async def _from_build(provider, ref: str):
    spec = spec_for(provider.name)
    spec = spec.model_copy(update={"image": snapshots.image_for(provider.name, ref, spec.image)})
    sb = await provider.create(spec, {"hangar.test": "1"})
    steps = await snapshots.restore(provider, sb, ref)
    if steps:
        await _sh(provider, sb, " && ".join(" ".join(argv) for argv in steps))
    return sb


async def _docker_build(provider, make_sandbox, tmp_path: Path,
                        build_id: str) -> tuple[str, str]:
    """A build of INSTALL's checkout, its builder gone: its image's name and id."""
    builder = await make_sandbox()
    await _sh(provider, builder, INSTALL)
    ref = await snapshots.save(provider, builder, build_id=build_id,
                               base_image=spec_for(provider.name).image,
                               dest_dir=tmp_path / "builds", max_bytes=1 << 20)
    await provider.destroy(builder)
    return ref, provider.client.images.get(ref).id


async def test_an_agent_in_a_sandbox_from_a_build_never_changes_the_build(
        provider, make_sandbox, tmp_path: Path):
    builder = await make_sandbox()
    await _sh(provider, builder, INSTALL)
    ref = await snapshots.save(provider, builder, build_id="bld-private",
                               base_image=spec_for(provider.name).image,
                               dest_dir=tmp_path / "builds", max_bytes=1 << 20)
    await provider.destroy(builder)
    try:
        if provider.name == "local":
            # The build made a spare copy while nobody waited; the first sandbox takes it.
            await provider.spare_copies.settle()
            [spare] = (Path(ref) / "spare").glob("copy-*")
            spare_inode = os.stat(spare / ".deps" / "lib.py").st_ino
        first = await _from_build(provider, ref)
        assert (await _sh(provider, first, LOOK, REPO_DIR)).split("\n")[:5] == [
            "pristine", "2 644", "/etc/hostname", "fifo", "no-new"]
        await _sh(provider, first, AGENT, REPO_DIR)
        # Through the hard link, the last write wins on both names, as on any checkout.
        assert (await _sh(provider, first, LOOK, REPO_DIR)) == "agent\n2 600\n/etc/hostname\n"
        if provider.name == "local":
            kept = Path(ref) / "repo"
            restored = provider.root / first.id / "workspace" / "repo"
            assert os.stat(restored / ".deps" / "lib.py").st_ino == spare_inode
            assert (kept / ".deps" / "lib.py").read_text() == "pristine\n"
            assert os.stat(kept / ".deps" / "lib.py").st_nlink == 2
            assert not (kept / ".deps" / "new").exists()
            assert os.stat(kept / ".deps" / "lib.py").st_ino != spare_inode
            assert os.readlink(kept / "out") == "/etc/hostname"  # kept as a link, not followed
            # The next spare is made from the kept checkout, not from anything a sandbox had;
            # one cut short by a stop is removed, not kept beside it.
            await provider.spare_copies.settle()
            [spare] = (Path(ref) / "spare").glob("copy-*")
            assert (spare / ".deps" / "lib.py").read_text() == "pristine\n"
            (Path(ref) / "spare" / "part-cutshort").mkdir()
        # The next sandboxes from the same build see it as install left it, whether they
        # take a spare or, with none ready, copy the kept checkout as they start.
        for _ in range(2):
            later = await _from_build(provider, ref)
            assert (await _sh(provider, later, LOOK, REPO_DIR)).split("\n")[:5] == [
                "pristine", "2 644", "/etc/hostname", "fifo", "no-new"]
        if provider.name == "local":
            await provider.spare_copies.settle()
            assert [p.name.split("-")[0] for p in (Path(ref) / "spare").iterdir()] == ["copy"]
    finally:
        await snapshots.drop(provider, ref)
    if provider.name == "local":
        assert not await asyncio.to_thread(os.path.exists, ref)


async def test_a_build_dropped_while_a_sandbox_runs_from_it_is_removed_when_it_ends(
        provider, make_sandbox, tmp_path: Path):
    """docker keeps an image a container uses: the dropped build's image stays, named as
    dropped, while its sandboxes run, and goes with the last of them; nothing of it is
    left untagged for good."""
    if provider.name != "docker":
        pytest.skip("a local build is a directory, removed at once")
    import docker.errors

    build_id = f"bld-drop-{secrets.token_hex(4)}"
    ref, image_id = await _docker_build(provider, make_sandbox, tmp_path, build_id)
    images = provider.client.images
    first, second = await _from_build(provider, ref), await _from_build(provider, ref)
    await snapshots.drop(provider, ref)
    with pytest.raises(docker.errors.ImageNotFound):
        images.get(ref)  # no new sandbox starts from a dropped build
    assert images.get(image_id).tags == [f"{snapshots.BUILD_IMAGE_REPO}:dropped-{build_id}"]
    await provider.destroy(first)
    assert images.get(image_id).id == image_id  # the second still runs from it
    assert await _sh(provider, second, "cat .deps/lib.py", REPO_DIR) == "pristine\n"
    ended = time.time()
    await provider.destroy(second)
    assert await image_removed(provider.client, image_id, since=ended)


async def test_a_dropped_build_goes_though_another_is_removed_as_the_images_are_listed(
        provider, make_sandbox, tmp_path: Path, monkeypatch):
    """Every hangar on the engine removes dropped builds' images: one another hangar
    removed between the listing and a look at it does not keep this one's."""
    if provider.name != "docker":
        pytest.skip("docker builds were always images")

    ref, image_id = await _docker_build(provider, make_sandbox, tmp_path,
                                        f"bld-race-{secrets.token_hex(4)}")
    sb = await _from_build(provider, ref)
    await snapshots.drop(provider, ref)
    listed = provider.client.api.images
    gone = {"Id": "sha256:" + secrets.token_hex(32),
            "RepoTags": [f"{snapshots.BUILD_IMAGE_REPO}:dropped-bld-gone"]}
    monkeypatch.setattr(provider.client.api, "images",
                        lambda *args, **kwargs: [gone, *listed(*args, **kwargs)])
    ended = time.time()
    await provider.destroy(sb)
    assert await image_removed(provider.client, image_id, since=ended)


async def test_a_dropped_name_another_hangar_removes_during_the_drop_is_given_again(
        provider, make_sandbox, tmp_path: Path, monkeypatch):
    """Another hangar on the engine may remove the dropped name between this one's tag and
    its untag of the build's name: the image is then named as dropped again, never left
    under the build's name, which nothing would ever remove."""
    if provider.name != "docker":
        pytest.skip("docker builds were always images")
    from docker.models.images import Image

    build_id = f"bld-again-{secrets.token_hex(4)}"
    ref, image_id = await _docker_build(provider, make_sandbox, tmp_path, build_id)
    sb = await _from_build(provider, ref)
    tag, raced = Image.tag, []

    def tag_then_removed_by_another(image, repository, name=None, **kwargs):
        done = tag(image, repository, name, **kwargs)
        if not raced:  # another hangar's listing found it, and it had two names then
            raced.append(name)
            provider.client.api.remove_image(f"{repository}:{name}")
        return done

    monkeypatch.setattr(Image, "tag", tag_then_removed_by_another)
    await snapshots.drop(provider, ref)
    assert raced == [f"dropped-{build_id}"]
    assert provider.client.images.get(image_id).tags == [
        f"{snapshots.BUILD_IMAGE_REPO}:dropped-{build_id}"]
    ended = time.time()
    await provider.destroy(sb)
    assert await image_removed(provider.client, image_id, since=ended)


async def test_a_build_kept_as_an_archive_before_builds_were_directories_still_starts(
        provider, make_sandbox, tmp_path: Path):
    if provider.name != "local":
        pytest.skip("docker builds were always images")
    import tarfile

    kept = tmp_path / "source"
    (kept / "repo" / ".deps").mkdir(parents=True)
    (kept / "repo" / ".deps" / "lib.py").write_text("from the archive\n")
    archive = tmp_path / "bld-old.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(kept / "repo", arcname="repo")
    sb = await _from_build(provider, str(archive))
    assert await _sh(provider, sb, "cat .deps/lib.py; ls -A /workspace/.hangar",
                     REPO_DIR) == "from the archive\n"
    await snapshots.drop(provider, str(archive))
    assert not archive.exists()


BUILD_SECRET = "npm_S3cret-never-kept-42"


async def test_a_checkout_holding_a_build_secret_is_never_kept(
        provider, make_sandbox, tmp_path: Path):
    """install wrote a build secret, base64-encoded, into .git: the build is refused,
    naming the file and the secret's name, and nothing of it is kept."""
    builder = await make_sandbox()
    await _sh(provider, builder, f"mkdir -p repo/.git && printf '%s' '{BUILD_SECRET}' | base64 "
              "> repo/.git/npm-cache")
    build_id = f"bld-secret-{secrets.token_hex(4)}"
    with pytest.raises(snapshots.SecretInCheckout) as refused:
        await snapshots.save(provider, builder, build_id=build_id,
                             base_image=spec_for(provider.name).image,
                             dest_dir=tmp_path / "builds", max_bytes=1 << 20,
                             secrets={"NPM_TOKEN": BUILD_SECRET})
    said = str(refused.value)
    assert "NPM_TOKEN in .git/npm-cache" in said and BUILD_SECRET not in said
    if provider.name == "local":
        assert list((tmp_path / "builds").iterdir()) == []
    else:
        import docker.errors

        with pytest.raises(docker.errors.ImageNotFound):
            provider.client.images.get(f"{snapshots.BUILD_IMAGE_REPO}:{build_id}")


async def test_set_id_bits_never_survive_a_copy_of_a_sandboxes_files(
        provider, make_sandbox, tmp_path: Path):
    """A file the sandbox marks set-user-id (owned, on the host, by hangar's user) and a
    set-group-id directory lose the bits in the kept build and in sandboxes made from it."""
    builder = await make_sandbox()
    await _sh(provider, builder, "mkdir -p repo/d && printf '#!/bin/sh\\n' > repo/tool && "
              "chmod 4755 repo/tool && chmod 2755 repo/d && stat -c '%a' repo/tool repo/d")
    ref = await snapshots.save(provider, builder, build_id="bld-setid",
                               base_image=spec_for(provider.name).image,
                               dest_dir=tmp_path / "builds", max_bytes=1 << 20)
    try:
        if provider.name == "local":
            kept = Path(ref) / "repo"
            assert oct(os.stat(kept / "tool").st_mode & 0o7777) == "0o755"
            assert oct(os.stat(kept / "d").st_mode & 0o7777) == "0o755"
        later = await _from_build(provider, ref)
        assert (await _sh(provider, later, "stat -c '%a' tool d", REPO_DIR)).split() == [
            "755", "755"]
    finally:
        await snapshots.drop(provider, ref)


async def test_a_sandbox_cannot_use_set_id_bits(provider, make_sandbox):
    """Inside, the workspace is mounted nosuid (bubblewrap) or the process may gain no
    privileges (docker's no-new-privileges): a set-id bit does nothing either way."""
    sb = await make_sandbox()
    said = await _sh(provider, sb, "grep ' /workspace ' /proc/self/mountinfo; "
                                   "grep NoNewPrivs /proc/self/status")
    workspace, no_new = said.splitlines()[0], said.splitlines()[-1]
    if provider.name == "local":
        assert "nosuid" in workspace.split()[5].split(","), workspace
    else:
        assert no_new.split() == ["NoNewPrivs:", "1"], said


async def test_a_spare_taken_before_its_maker_ended_is_made_again(tmp_path: Path, monkeypatch):
    """A sandbox may take a spare the moment it is renamed into place, before the task
    that made it has ended; the refill that sandbox asks for then must not be lost."""
    kept = tmp_path / "build"
    (kept / "repo").mkdir(parents=True)
    (kept / "repo" / "file").write_text("pristine\n")
    rename = os.rename
    loop = asyncio.get_running_loop()
    renamed = asyncio.Event()

    def slow_to_end(source, dest, *args, **kwargs):
        rename(source, dest, *args, **kwargs)
        if Path(source).name.startswith("part-"):  # the maker's last step: it ends late
            loop.call_soon_threadsafe(renamed.set)
            time.sleep(0.5)

    monkeypatch.setattr(os, "rename", slow_to_end)
    spares = snapshots.SpareCopies()
    spares.refill(kept)
    await asyncio.wait_for(renamed.wait(), 60)
    # A sandbox takes it while its maker still runs, and asks for the next.
    assert await spares.take(kept, tmp_path / "sandbox-repo")
    spares.refill(kept)
    await spares.settle()
    assert [p.name.split("-")[0] for p in (kept / "spare").iterdir()] == ["copy"]
    assert (tmp_path / "sandbox-repo" / "file").read_text() == "pristine\n"
