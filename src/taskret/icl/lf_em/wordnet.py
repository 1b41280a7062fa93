"""The few WordNet 3.0 look-ups LF-EM makes, read straight from WordNet's database files.

The original calls NLTK's WordNet (3.5): ``WordNetLemmatizer().lemmatize`` and, for an adjective, the nouns its
senses derive (``derivationally_related_forms``). This reads the same files (``index.adj``, ``index.verb``,
``adj.exc``, ``verb.exc``, ``data.adj``, ``data.noun``) with NLTK 3.5's morphology, so neither NLTK nor its data
download is needed: Debian's and Ubuntu's ``wordnet-base`` package (``/usr/share/wordnet``) or an NLTK data folder
(``corpora/wordnet`` or ``corpora/wordnet.zip``) serves, or a folder named by ``TASKRET_WORDNET``.
"""

from __future__ import annotations

import os
import re
import sys
import zipfile
from collections import Counter
from functools import lru_cache
from pathlib import Path

from ...models import MissingDependency

#: Environment variable naming a WordNet 3.0 database folder (or NLTK's ``wordnet.zip``) to use first.
WORDNET_ENV = "TASKRET_WORDNET"
WORDNET_INSTALL = ("LF-EM needs the WordNet 3.0 database: `apt-get install wordnet-base` (Debian, Ubuntu), or "
                   "`python -m nltk.downloader wordnet`, or set TASKRET_WORDNET to a folder holding its "
                   "index.adj, data.adj, ... files")
_FILES = ("index.adj", "index.verb", "adj.exc", "verb.exc", "data.adj", "data.noun")

# NLTK's morphological substitutions (WordNet's morphy) for the two parts of speech LF-EM lemmatizes.
_SUBSTITUTIONS = {
    "a": (("er", ""), ("est", ""), ("er", "e"), ("est", "e")),
    "v": (("s", ""), ("ies", "y"), ("es", "e"), ("es", ""), ("ed", "e"), ("ed", ""), ("ing", "e"), ("ing", "")),
}
_POS_FILE = {"a": "adj", "v": "verb", "n": "noun"}
_SYNTACTIC_MARKER = re.compile(r"(.*?)(\(.*\))?$")


class WordNetMissing(MissingDependency):
    """No WordNet 3.0 database was found."""


def _candidates() -> list[Path]:
    found = []
    if os.environ.get(WORDNET_ENV):
        found.append(Path(os.environ[WORDNET_ENV]).expanduser())
    found.append(Path("/usr/share/wordnet"))
    roots = [p for p in os.environ.get("NLTK_DATA", "").split(os.pathsep) if p]
    roots += ["~/nltk_data", f"{sys.prefix}/nltk_data", f"{sys.prefix}/share/nltk_data", f"{sys.prefix}/lib/nltk_data",
              "/usr/share/nltk_data", "/usr/local/share/nltk_data", "/usr/lib/nltk_data", "/usr/local/lib/nltk_data"]
    for root in roots:
        found += [Path(root).expanduser() / "corpora" / "wordnet", Path(root).expanduser() / "corpora" / "wordnet.zip"]
    return found


class WordNet:
    """WordNet 3.0's database, from a folder or NLTK's ``wordnet.zip``; files are read when first needed."""

    def __init__(self, location: str | Path):
        self.location = Path(location)
        self._files: dict[str, bytes] = {}
        self._index: dict[str, dict[str, list[int]]] = {}
        self._exceptions: dict[str, dict[str, list[str]]] = {}
        if self.location.is_dir():
            missing = [f for f in _FILES if not (self.location / f).is_file()]
        else:
            with zipfile.ZipFile(self.location) as archive:
                names = set(archive.namelist())
            missing = [f for f in _FILES if f"wordnet/{f}" not in names]
        if missing:
            raise WordNetMissing(f"{self.location} lacks {', '.join(missing)}")

    @classmethod
    def find(cls) -> WordNet:
        """The first WordNet database among ``TASKRET_WORDNET``, ``/usr/share/wordnet`` and NLTK's data folders."""
        for location in _candidates():
            if location.exists():
                try:
                    return cls(location)
                except (WordNetMissing, zipfile.BadZipFile, OSError):
                    continue
        raise WordNetMissing(WORDNET_INSTALL)

    def _file(self, name: str) -> bytes:
        if name not in self._files:
            if self.location.is_dir():
                self._files[name] = (self.location / name).read_bytes()
            else:
                with zipfile.ZipFile(self.location) as archive:
                    self._files[name] = archive.read(f"wordnet/{name}")
        return self._files[name]

    def _lines(self, name: str):
        return self._file(name).decode("utf-8").splitlines()

    def index(self, pos: str) -> dict[str, list[int]]:
        """Lemma -> synset offsets of one part of speech (``index.adj``, ``index.verb``)."""
        if pos not in self._index:
            entries = {}
            for line in self._lines(f"index.{_POS_FILE[pos]}"):
                if line.startswith(" "):  # the licence header
                    continue
                fields = line.split()
                n_synsets, n_pointers = int(fields[2]), int(fields[3])
                entries[fields[0]] = [int(x) for x in fields[6 + n_pointers:6 + n_pointers + n_synsets]]
            self._index[pos] = entries
        return self._index[pos]

    def exceptions(self, pos: str) -> dict[str, list[str]]:
        if pos not in self._exceptions:
            self._exceptions[pos] = {f[0]: f[1:] for f in (line.split() for line in self._lines(f"{_POS_FILE[pos]}.exc"))
                                     if f}
        return self._exceptions[pos]

    def morphy(self, form: str, pos: str) -> list[str]:
        """The lemmas ``form`` may be an inflection of, as NLTK 3.5's ``_morphy`` finds them (exceptions first,
        then the suffix rules applied until a form in WordNet turns up)."""
        index = self.index(pos)
        substitutions = _SUBSTITUTIONS[pos]

        def apply_rules(forms):
            return [f[:-len(old)] + new for f in forms for old, new in substitutions if f.endswith(old)]

        def known(forms):
            return list(dict.fromkeys(f for f in forms if f in index))

        exceptions = self.exceptions(pos)
        if form in exceptions:
            return known([form] + exceptions[form])
        forms = apply_rules([form])
        results = known([form] + forms)
        if results:
            return results
        while forms:
            forms = apply_rules(forms)
            results = known(forms)
            if results:
                return results
        return []

    def lemmatize(self, word: str, pos: str) -> str:
        """NLTK's ``WordNetLemmatizer().lemmatize``: the shortest lemma, else the word itself."""
        lemmas = self.morphy(word, pos)
        return min(lemmas, key=len) if lemmas else word

    def _synset(self, pos: str, offset: int) -> tuple[list[str], list[tuple[str, str, int, int, int]]]:
        """A synset's lemma names and lemma pointers ``(symbol, pos, offset, source, target)`` (1-based lemma
        numbers; synset pointers, 0000, are left out)."""
        data = self._file(f"data.{_POS_FILE[pos]}")
        line = data[offset:data.index(b"\n", offset)].decode("utf-8")
        fields = line.split("|")[0].split()
        n_lemmas = int(fields[3], 16)
        names = [_SYNTACTIC_MARKER.match(fields[4 + 2 * i]).group(1) for i in range(n_lemmas)]
        at = 4 + 2 * n_lemmas
        pointers = []
        for i in range(int(fields[at])):
            symbol, target_offset, target_pos, numbers = fields[at + 1 + 4 * i:at + 5 + 4 * i]
            if numbers != "0000":
                pointers.append((symbol, target_pos, int(target_offset), int(numbers[:2], 16), int(numbers[2:], 16)))
        return names, pointers

    def adjective_to_noun(self, word: str) -> str | None:
        """The noun the senses of adjective ``word`` derive most often (``taller`` -> ``tallness``), as the
        original's ``convert(word, 'a', 'n')[0]``; ties go to the alphabetically first (the original's order
        there varies between runs)."""
        word = word.lower()
        nouns = []
        for form in self.morphy(word, "a"):
            for offset in self.index("a").get(form, []):
                names, pointers = self._synset("a", offset)
                # every lemma of every sense counts, as in the original
                for name in names:
                    for symbol, target_pos, target_offset, src, target in pointers:
                        if symbol == "+" and target_pos == "n" and names[src - 1] == name:
                            nouns.append(self._synset("n", target_offset)[0][target - 1])
        if not nouns:
            return None
        counts = Counter(nouns)
        return min(counts, key=lambda n: (-counts[n], n))


@lru_cache(maxsize=1)
def wordnet() -> WordNet:
    """The WordNet database found on this machine (once per process)."""
    return WordNet.find()
