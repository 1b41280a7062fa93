"""IdList: ids as UTF-8 bytes and offsets, read back as the list of strings they were."""

from __future__ import annotations

import numpy as np
import pytest

from taskret.ids import IDS_FILE, IDS_OFFSETS_FILE, IdList, IdLookup, repeated_hashes

IDS = ["d1", "caf\u00e9", "\U0001F600 smile", "", "a/b:c", "x" * 300]


def test_an_id_list_reads_back_as_the_list_it_was():
    ids = IdList.of(IDS)
    assert len(ids) == len(IDS) and list(ids) == IDS and ids == IDS and ids == tuple(IDS)
    assert [ids[i] for i in range(len(IDS))] == IDS and ids[-1] == IDS[-1] and ids[np.int64(2)] == IDS[2]
    assert ids[1:4] == IDS[1:4] and ids[::-2] == IDS[::-2]
    assert "caf\u00e9" in ids and "cafe" not in ids and ids.index("a/b:c") == 4
    assert ids != IDS[:-1] and ids != [*IDS[:-1], "y"] and IdList.of(ids) is ids
    with pytest.raises(IndexError):
        ids[len(IDS)]
    with pytest.raises(TypeError, match="ids must be strings, not int"):
        IdList.of(["a", 3])
    assert not IdList.of([]) and list(IdList.of([])) == []


def test_iteration_crosses_its_chunks(monkeypatch):
    monkeypatch.setattr("taskret.ids._CHUNK", 4)
    many = [f"id-{n}" for n in range(11)]
    assert list(IdList.of(many)) == many


def test_a_duplicate_is_found_also_among_colliding_hashes(monkeypatch):
    assert IdList.of(IDS).first_duplicate() is None
    assert IdList.of(["a", "b", "c", "b", "a"]).first_duplicate() == "b"  # its second occurrence comes first
    monkeypatch.setattr("builtins.hash", lambda value: 7)  # every id hashes alike: told apart by their text
    assert IdList.of(["a", "b", "c"]).first_duplicate() is None
    assert IdList.of(["a", "b", "c", "b"]).first_duplicate() == "b"


@pytest.mark.parametrize("collide", [False, True])
def test_a_lookup_finds_each_id_also_among_colliding_hashes(monkeypatch, collide):
    ids = IdList.of([f"e{n}" for n in range(30)])
    if collide:
        monkeypatch.setattr("builtins.hash", lambda value: 7)  # every id hashes alike: found by its text
    lookup = IdLookup(ids)
    assert lookup.positions(["e3", "e29", "e0", "e3"]) == [3, 29, 0, 3] and lookup.positions([]) == []
    assert lookup.position("e17") == 17 and lookup.position("e30") is None and lookup.position(17) is None
    assert lookup.positions(["e30", "e1"]) == [None, 1]


def test_saved_ids_load_whole_or_mapped_and_bad_files_are_named(tmp_path):
    IdList.of(IDS).save(tmp_path)
    assert IdList.saved_in(tmp_path) and not IdList.saved_in(tmp_path / "none")
    assert IdList.load(tmp_path) == IDS
    mapped = IdList.load(tmp_path, mmap=True)
    assert isinstance(mapped._data, np.memmap) and mapped == IDS and mapped == IdList.of(IDS)
    np.save(tmp_path / IDS_OFFSETS_FILE, np.array([0, 2, 1], dtype=np.int64))
    with pytest.raises(ValueError, match=f"{IDS_OFFSETS_FILE}: not the offsets of"):
        IdList.load(tmp_path)
    np.save(tmp_path / IDS_FILE, np.zeros(3, dtype=np.int32))
    with pytest.raises(ValueError, match=f"{IDS_FILE}: not an array of UTF-8 bytes"):
        IdList.load(tmp_path)


def test_repeated_hashes_are_the_values_that_occur_more_than_once():
    hashes = np.array([5, -3, 9, 5, 2, 9, 9], dtype=np.int64)
    assert repeated_hashes(hashes) == {5, 9}
    assert repeated_hashes(np.array([3, 1, 2], dtype=np.int64)) == set()
    assert repeated_hashes(np.array([], dtype=np.int64)) == set()
