#!/usr/bin/env python3
"""ctest conformance.coverage: what metaroce-conform says it checks agrees
with the spec's section 12.

A vendor reads conformance/README.md's "Not yet here" paragraph to learn
which of the spec's peer-testable rules the suite leaves unchecked, and
passes `--rule ID` to run a rule's checks. So:
- every rule whose "how to test" column in section 12 names a peer test is
  either named by a check (`--list`, so `--rule ID` runs it) or listed in
  that paragraph (once the README said only CONN-2's tail was missing, while
  ENC-2, SEQ-5, ACK-2, TRIM-3, COMP-3 and others had no check at all);
- no rule is both (the paragraph would hide a check, or a check would hide
  a gap);
- every ID `--list` names is a rule of the spec.

  coverage_test.py METAROCE_CONFORM SPEC README
"""
import re
import subprocess
import sys

RULE = r"[A-Z]+-[0-9]+"


def peer_rules(spec):
    """The rules of section 12 whose test column names a peer test."""
    section = spec.split("## 12. Conformance", 1)[1].split("## Appendix", 1)[0]
    rules = {}
    for line in section.splitlines():
        cells = line.split("|")
        if len(cells) < 4 or not re.fullmatch(rf"\s*{RULE}(,\s*{RULE})*\s*", cells[1]):
            continue
        if re.search(r"\bpeer(\s*\([^)]*\))?:", cells[2]):
            for rule in re.findall(RULE, cells[1]):
                rules[rule] = cells[2].strip()
    return rules


def spec_rules(spec):
    return set(re.findall(rf"\*\*({RULE})\*\* \(", spec))


def listed(conform):
    out = subprocess.run([conform, "--list"], check=True, capture_output=True, text=True).stdout
    rules = set()
    for line in out.splitlines():
        # "%-14s title": the rule column, IDs separated by ", ".
        rules.update(re.findall(RULE, line[:14]))
    return rules


def not_yet_here(readme):
    m = re.search(r"\nNot yet here:(.*?)\n\n", readme, re.S)
    if not m:
        return None
    return set(re.findall(RULE, m.group(1)))


def main():
    conform, spec_path, readme_path = sys.argv[1:4]
    with open(spec_path, encoding="utf-8") as f:
        spec = f.read()
    with open(readme_path, encoding="utf-8") as f:
        readme = f.read()
    peer = peer_rules(spec)
    checked = listed(conform)
    missing = not_yet_here(readme)
    bad = []
    if missing is None:
        bad.append("conformance/README.md has no 'Not yet here:' paragraph")
        missing = set()
    for rule in sorted(peer):
        if rule not in checked and rule not in missing:
            bad.append(f"{rule}: a peer test in section 12, but no check names it (--list) and "
                       "README's 'Not yet here' does not list it")
    for rule in sorted(checked & missing):
        bad.append(f"{rule}: named by a check (--list) and listed as 'Not yet here'")
    known = spec_rules(spec)
    for rule in sorted(checked - known):
        bad.append(f"{rule}: a check names it (--list), but the spec states no such rule")
    for rule in sorted(missing - known):
        bad.append(f"{rule}: README's 'Not yet here' lists it, but the spec states no such rule")
    for b in bad:
        print("FAIL:", b)
    if not bad:
        print(f"ok: {len(peer)} peer-testable rules: {len(peer.keys() & checked)} checked, "
              f"{len(peer.keys() & missing)} listed as not yet here")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
