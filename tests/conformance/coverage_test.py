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
- every ID `--list` names is a rule of the spec;
- `--list-unchecked` (what `--rule` says of a rule no check names) holds
  every other rule of the spec, "(not yet)" exactly for those with a peer
  test, which are the README's "Not yet here";
- section 12's "Unchecked on a remote target" list names exactly the rules
  `--list-unchecked` lists (the spec once said only that a conforming
  implementation satisfies every rule, while 16 had no peer check);
- section 12's "Unverified on a target in real time" list and its "Verified
  in part there", the README's "Unverified in real time:" paragraph and
  `--list-unchecked --target remote` name exactly the rules every check of
  which (and those some checks of which) have a title (`--list`) ending
  "(simulated time only)": the runner skips those in real time, and the
  spec once told a vendor that LOSS-4, ACK-1 and ten more were verified on
  a remote target, where no check of them runs;
- the README's "Simulated time only:" paragraph names exactly the checks
  that skip in real time, those whose title (`--list`) ends "(simulated
  time only)" (the runner skips by the same flag; conformance_test checks
  flag and title agree): the README once listed LOSS-4 and SCHED-2 alone.

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


def spec_unchecked(spec):
    """The rules section 12 lists as unchecked on a remote target, or None."""
    m = re.search(r"Unchecked on a remote\s+target[^:]*:(.*?)\.\n", spec, re.S)
    return None if m is None else re.findall(RULE, m.group(1))


def list_lines(conform, option, *more):
    return subprocess.run([conform, option, *more], check=True, capture_output=True,
                          text=True).stdout.splitlines()


def spec_real_time(spec):
    """Section 12's rules unverified on a target in real time, and those
    verified in part there: (set, set), or None."""
    none = re.search(r"Unverified on a target in\s+real time(.*?)\.\n", spec, re.S)
    part = re.search(r"Verified in part there[^:]*:(.*?)\.\n", spec, re.S)
    if none is None or part is None:
        return None
    return (set(re.findall(RULE, none.group(1).rsplit(":", 1)[1])),
            set(re.findall(RULE, part.group(1).split("(", 1)[0])))


def readme_real_time(readme):
    """The README's "Unverified in real time:" paragraph: (set, set), or None."""
    text = paragraph(readme, "Unverified in real time:")
    if text is None or "; in part," not in text:
        return None
    none, part = text.split("; in part,", 1)
    return set(re.findall(RULE, none)), set(re.findall(RULE, part.split("(", 1)[0]))


def real_time_listed(conform):
    """What `--list-unchecked --target remote` adds: (set, set)."""
    none, part = set(), set()
    for line in list_lines(conform, "--list-unchecked", "--target", "remote"):
        m = re.match(rf"({RULE}) +\((simulated time only|in part)\) ", line)
        if m:
            (none if m.group(2) == "simulated time only" else part).add(m.group(1))
    return none, part


def checks(conform):
    """(rule IDs, title) of each check `--list` names: "RULES TITLE", the
    rules a list of IDs separated by ", "."""
    out = []
    for line in list_lines(conform, "--list"):
        m = re.match(rf"({RULE}(?:, {RULE})*) +(.*)$", line)
        if not m:
            raise SystemExit(f"FAIL: --list line not 'RULES TITLE': {line!r}")
        out.append((tuple(re.findall(RULE, m.group(1))), m.group(2)))
    return out


def unchecked(conform):
    """{rule: True when "(not yet)", a peer test the suite lacks}."""
    out = {}
    for line in list_lines(conform, "--list-unchecked"):
        m = re.match(rf"({RULE}) +\((not yet|no peer test)\) ", line)
        if not m:
            raise SystemExit(f"FAIL: --list-unchecked line not 'RULE (KIND) WHY': {line!r}")
        out[m.group(1)] = m.group(2) == "not yet"
    return out


def paragraph(readme, head):
    m = re.search(rf"\n{head}(.*?)\n\n", readme, re.S)
    return m.group(1) if m else None


def not_yet_here(readme):
    text = paragraph(readme, "Not yet here:")
    return None if text is None else set(re.findall(RULE, text))


def simulated_only(readme):
    """The checks the README says need simulated time: items separated by
    ";", each a check's rule IDs as --list writes them."""
    text = paragraph(readme, "Simulated time only")
    if text is None:
        return None
    text = text.split(":", 1)[1]
    return sorted(tuple(re.findall(RULE, item)) for item in text.split(";"))


def main():
    conform, spec_path, readme_path = sys.argv[1:4]
    with open(spec_path, encoding="utf-8") as f:
        spec = f.read()
    with open(readme_path, encoding="utf-8") as f:
        readme = f.read()
    peer = peer_rules(spec)
    listed = checks(conform)
    checked = {rule for rules, _ in listed for rule in rules}
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
    # What --rule tells of a rule no check names.
    told = unchecked(conform)
    for rule in sorted(known - checked - told.keys()):
        bad.append(f"{rule}: no check names it, and --list-unchecked does not list it")
    for rule in sorted(told.keys() & checked):
        bad.append(f"{rule}: a check names it (--list), and --list-unchecked lists it")
    for rule in sorted(told.keys() - known):
        bad.append(f"{rule}: --list-unchecked lists it, but the spec states no such rule")
    for rule, not_yet in sorted(told.items()):
        if not_yet != (rule in peer):
            bad.append(f"{rule}: --list-unchecked says {'(not yet)' if not_yet else '(no peer test)'}"
                       f", but section 12 {'names' if rule in peer else 'names no'} peer test")
        if not_yet != (rule in missing):
            bad.append(f"{rule}: --list-unchecked says {'(not yet)' if not_yet else '(no peer test)'}"
                       f", but README's 'Not yet here' {'lists' if rule in missing else 'omits'} it")
    # What section 12 tells a vendor a passing run leaves unverified.
    said_unchecked = spec_unchecked(spec)
    if said_unchecked is None:
        bad.append("section 12 has no 'Unchecked on a remote target' list")
    else:
        for rule in sorted(set(said_unchecked) - told.keys()):
            bad.append(f"{rule}: section 12 lists it as unchecked on a remote target, but "
                       "--list-unchecked does not")
        for rule in sorted(told.keys() - set(said_unchecked)):
            bad.append(f"{rule}: --list-unchecked lists it, but section 12's 'Unchecked on a "
                       "remote target' does not")
    # The rules a run in real time leaves unverified, or verified in part.
    titles = {}
    for rules, title in listed:
        for rule in rules:
            titles.setdefault(rule, []).append(title.endswith("(simulated time only)"))
    want = ({r for r, sims in titles.items() if all(sims)},
            {r for r, sims in titles.items() if any(sims) and not all(sims)})
    for where, got in (("section 12's 'Unverified on a target in real time'", spec_real_time(spec)),
                       ("README's 'Unverified in real time:'", readme_real_time(readme)),
                       ("--list-unchecked --target remote", real_time_listed(conform))):
        if got is None:
            bad.append(f"{where}: no such list (and its 'in part' rules)")
            continue
        for kind, said, real in (("unverified", got[0], want[0]), ("in part", got[1], want[1])):
            if said != real:
                bad.append(f"{where} names {sorted(said)} as {kind} in real time, but the checks "
                           f"(--list, '(simulated time only)') make it {sorted(real)}")
    # The checks that need simulated time, as the README names them.
    sim = sorted(rules for rules, title in listed if title.endswith("(simulated time only)"))
    said = simulated_only(readme)
    if said is None:
        bad.append("conformance/README.md has no 'Simulated time only' paragraph")
    elif said != sim:
        bad.append(f"README's 'Simulated time only' names {said}, but the checks whose title "
                   f"says so (--list) are {sim}")
    for b in bad:
        print("FAIL:", b)
    if not bad:
        print(f"ok: {len(peer)} peer-testable rules: {len(peer.keys() & checked)} checked, "
              f"{len(peer.keys() & missing)} listed as not yet here")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
