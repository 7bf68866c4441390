#!/usr/bin/env python3
"""Check a zinc-mem SVG against the timeline JSON it was drawn from: the SVG
must be well-formed XML, and the totals in its <desc> must equal the peak
total of each location in the JSON samples.
usage: check_svg.py TIMELINE.json CHART.svg"""
import json
import sys
import xml.etree.ElementTree as ET

NS = "{http://www.w3.org/2000/svg}"


def main():
    data = json.load(open(sys.argv[1]))
    root = ET.parse(sys.argv[2]).getroot()
    if root.tag != NS + "svg":
        print("not an svg root:", root.tag)
        return 1
    desc = json.loads(root.find(NS + "desc").text)
    locs = data["locations"]
    for i, loc in enumerate(locs):
        peak = max((sum(s["bytes"][i]) for s in data["samples"]), default=0)
        if desc["peak"][loc] != peak:
            print(f"{loc}: svg says {desc['peak'][loc]}, json peak {peak}")
            return 1
    if desc["samples"] != len(data["samples"]):
        print("sample counts differ")
        return 1
    polys = root.findall(NS + "polygon")
    if data["samples"] and len(polys) != len(data["categories"]):
        print(f"{len(polys)} stacked areas for {len(data['categories'])} categories")
        return 1
    print(f"svg ok: {len(data['samples'])} samples, peaks {desc['peak']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
