"""gateway.runtime.git_rules by table: the names a worktree and its branch get and which a user may give (WT-2, WT-3),
what a resume finds wrong with a worktree (WT-4), what a merge refuses (WT-5), checkpoint refs (CK-1), and how git's
output reads."""

from __future__ import annotations

import pytest

from gateway.runtime.git_rules import (
    FileChange,
    MergeFacts,
    WorktreeFacts,
    branch_refusal,
    checkpoint_number,
    checkpoint_ref,
    default_branch,
    merge_refusal,
    parse_changes,
    ref_refusal,
    worktree_branch,
    worktree_problem,
)


def test_the_default_branch_is_named_after_the_session() -> None:
    assert default_branch("fix-login", "s-1") == "acp/fix-login"
    assert default_branch(None, "s-1") == "acp/s-1"


@pytest.mark.parametrize(("branch", "taken"), [
    ("acp/s-0123", True), ("feature/login", True), ("fix_1.2", True), ("a", True),
    ("", False), ("-x", False), ("/x", False), ("x/", False), (".x", False), ("x.lock", False), ("a..b", False),
    ("a//b", False), ("a/.b", False), ("HEAD", False), ("a b", False), ("a~1", False), ("a^", False), ("a:b", False),
    ("a@{1}", False), ("x" * 201, False), ("é", False), ("a\nb", False), ("main\n", False),
    ("refs/heads/main", False), ("FETCH_HEAD", False), ("ORIG_HEAD", False), ("heads/x", True),
])
def test_which_branch_names_are_taken(branch: str, taken: bool) -> None:
    assert (branch_refusal(branch) is None) is taken


@pytest.mark.parametrize(("ref", "taken"), [
    ("main", True), ("v1.2", True), ("HEAD~2", True), ("origin/main", True), ("0123abcd", True), ("main^", True),
    ("-main", False), ("--upload-pack=x", False), ("a b", False), ("a;b", False), ("$(x)", False), ("", False),
    ("a\x00b", False), ("trunk\n", False),
])
def test_which_bases_are_taken(ref: str, taken: bool) -> None:
    assert (ref_refusal(ref) is None) is taken


def test_checkpoint_refs_round_trip_and_belong_to_their_session() -> None:
    ref = checkpoint_ref("s-1", 12)
    assert ref == "refs/acp/checkpoints/s-1/000012"
    assert checkpoint_number(ref, "s-1") == 12
    assert checkpoint_number(ref, "s-2") is None
    assert checkpoint_number("refs/acp/checkpoints/s-1/x", "s-1") is None


@pytest.mark.parametrize(("facts", "words"), [
    (WorktreeFacts(True, True, "acp/x"), None),
    (WorktreeFacts(False, False, None), "no longer exists"),
    (WorktreeFacts(True, False, None), "no longer a checkout of its repository"),
    (WorktreeFacts(True, True, "main"), "is on branch main, not acp/x"),
    (WorktreeFacts(True, True, None), "detached HEAD"),
])
def test_what_a_resume_finds_wrong_with_a_worktree(facts: WorktreeFacts, words: str | None) -> None:
    said = worktree_problem("s-1", "/w/s-1", "acp/x", facts)
    if words is None:
        assert said is None
    else:
        assert said is not None and words in said and "s-1" in said and "/w/s-1" in said
        assert ("recover s-1 --fresh" in said) is (not facts.exists or not facts.of_repository)


@pytest.mark.parametrize(("facts", "words"), [
    (MergeFacts(True, (), None, False), None),
    (MergeFacts(True, (), "/repo", False), None),
    (MergeFacts(False, (), None, False), "is not a branch"),
    (MergeFacts(True, ("a.txt", "b/c.txt"), None, False), "conflicts with main in a.txt, b/c.txt"),
    (MergeFacts(True, tuple(f"f{i}" for i in range(25)), None, False), "and 5 more"),
    (MergeFacts(True, (), "/repo", True), "/repo with uncommitted changes"),
])
def test_what_a_merge_refuses(facts: MergeFacts, words: str | None) -> None:
    said = merge_refusal("s-1", "acp/x", "main", facts)
    assert (said is None) if words is None else (said is not None and words in said)


def test_git_output_reads_as_file_changes() -> None:
    names = b"M\0a.txt\0A\0new dir/b.bin\0D\0gone\0A\0bad\xff\xfename\0"
    counts = b"1\t1\ta.txt\0-\t-\tnew dir/b.bin\0" + b"0\t3\tgone\0" + b"1\t0\tbad\xff\xfename\0"
    assert parse_changes(names, counts) == [FileChange("a.txt", "M", 1, 1), FileChange("bad\\xff\\xfename", "A", 1, 0),
                                            FileChange("gone", "D", 0, 3),
                                            FileChange("new dir/b.bin", "A", None, None)]
    assert parse_changes(b"", b"") == []


@pytest.mark.parametrize(("head", "branch"), [
    ("ref: refs/heads/acp/x\n", "acp/x"), ("0123abcd\n", None), ("ref: refs/tags/v1\n", None), ("", None),
])
def test_a_worktree_head_names_its_branch(head: str, branch: str | None) -> None:
    assert worktree_branch(head) == branch
