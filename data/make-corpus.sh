#!/usr/bin/env bash
# Regenerates data/fortunes.txt, the reference GPT's byte-level training text, from the
# BSD-licensed datfiles of Debian's fortunes/fortunes-min packages (see data/README.md).
#
#   data/make-corpus.sh [OUT]     (default OUT: fortunes.txt beside this script)
#
# Reads the datfiles from $FORTUNES_DIR, else /usr/share/games/fortunes when both packages are
# installed, else downloads the two .debs with `apt-get download` into a temporary directory.
# Output depends only on the datfiles' bytes; with version 1:1.99.1-7.3 (Debian 12) it is the
# committed file byte for byte. Needs bash, python3 (standard library) and, to download,
# apt-get and dpkg-deb.
set -euo pipefail

expected_version=1:1.99.1-7.3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:-$here/fortunes.txt}

# The datfiles of fortune-mod-9708's inoffensive set (the BSD-era list in cookie-files), less
# those kept out for reasons given in data/README.md: the files added later without a licence
# statement (debian disclaimer knghtbrd linux paradoxum perl pratchett tao), reproductions of
# single copyrighted works (songs-poems startrek zippy), and group humour (ethnic men-women).
files=(art ascii-art computers cookie definitions drugs education food fortunes goedel
  humorists kids law linuxcookie literature love magic medicine miscellaneous news people
  pets platitudes politics riddles science sports translate-me wisdom work)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

src=${FORTUNES_DIR:-}
if [[ -z $src ]]; then
  if dpkg-query -W -f='${Status}\n' fortunes fortunes-min 2>/dev/null |
    grep -c 'install ok installed' | grep -qx 2; then
    src=/usr/share/games/fortunes
    version=$(dpkg-query -W -f='${Version}' fortunes)
  else
    echo "make-corpus: fortunes not installed; downloading fortunes and fortunes-min" >&2
    (cd "$work" && apt-get download fortunes fortunes-min >&2)
    for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$work/root"; done
    src=$work/root/usr/share/games/fortunes
    version=$(dpkg-deb -f "$work"/fortunes_*.deb Version)
  fi
  if [[ $version != "$expected_version" ]]; then
    echo "make-corpus: warning: fortunes $version, not $expected_version;" \
      "the output may differ from the committed file" >&2
  fi
fi
for f in "${files[@]}"; do
  [[ -f $src/$f ]] || { echo "make-corpus: $src/$f not found" >&2; exit 1; }
done

# Entries are separated by lines holding only '%'. Each line is rendered as a terminal would
# show it: backspace overstrikes ("_\bx" underlines x, "'\be" accents e), so underlines go,
# accents compose (e, ' -> é) and doubled letters (bold) collapse. Then: UTF-8 with invalid
# bytes dropped, NFC, no control characters but tab and newline, no trailing whitespace, no
# blank lines at an entry's ends, exact duplicate entries dropped (first kept), entries
# separated by one blank line.
python3 - "$src" "$work/out.txt" "${files[@]}" <<'EOF'
import re, sys, unicodedata

ACCENTS = {"'": "\u0301", "`": "\u0300", "^": "\u0302", "~": "\u0303", '"': "\u0308",
           ",": "\u0327"}

def overstrike(line):
    cells, col = [], 0
    for ch in line:
        if ch == "\b":
            col = max(col - 1, 0)
            continue
        if col == len(cells):
            cells.append([])
        cells[col].append(ch)
        col += 1
    out = []
    for stack in cells:
        marks = [c for c in stack if c != "_"] or ["_"]
        base = [c for c in marks if c not in ACCENTS] or marks
        ch = base[-1]
        for c in marks:
            if c in ACCENTS and c != ch:
                composed = unicodedata.normalize("NFC", ch + ACCENTS[c])
                ch = composed if len(composed) == 1 else ch
        out.append(ch)
    return "".join(out)

# A few entries were stored as UTF-8 misread as Latin-1 once or twice ("donÃ¢Â\x80Â\x99t");
# undo that, and write the typographic quotes they hid the way the rest of the text does.
ASCII_LOOKALIKES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"',
                                  "\u2217": "*"})

def unmangle(match):
    text = match.group(0)
    while True:
        try:
            fixed = text.encode("latin-1").decode("utf-8")
        except UnicodeError:
            return text
        if fixed == text:
            return text
        text = fixed

def clean(line):
    line = re.sub(r"[\x80-\xff]+", unmangle, line).translate(ASCII_LOOKALIKES)
    line = overstrike(line)
    line = "".join(c for c in line if c == "\t" or unicodedata.category(c) != "Cc")
    return unicodedata.normalize("NFC", line).rstrip()

src, dst, names = sys.argv[1], sys.argv[2], sys.argv[3:]
seen, entries = set(), []
for name in names:
    text = open(f"{src}/{name}", "rb").read().decode("utf-8", errors="ignore")
    text = text.replace("\r\n", "\n")
    entry = []
    for line in text.split("\n") + ["%"]:
        if line != "%":
            entry.append(clean(line))
            continue
        body = "\n".join(entry).strip("\n")
        entry = []
        if body and body not in seen:
            seen.add(body)
            entries.append(body)
with open(dst, "w", encoding="utf-8", newline="\n") as f:
    f.write("\n\n".join(entries) + "\n")
print(f"make-corpus: {len(entries)} entries", file=sys.stderr)
EOF

mv "$work/out.txt" "$out"
echo "make-corpus: wrote $out ($(wc -c <"$out") bytes)" >&2
