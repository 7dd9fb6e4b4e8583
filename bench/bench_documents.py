"""Documents (issue 29): extraction throughput per format through the one extractor (the bounded
parser's child process included), and OCR accuracy (character error rate) on rendered pages.

    .venv/bin/python -m bench.bench_documents            # 12 files a format, 6 OCR pages
    .venv/bin/python -m bench.bench_documents --quick    # 4 files a format, 3 OCR pages

The corpus is tests/support/corpus.py's (generated with the formats' own libraries in write mode).
Prints a table and writes bench/results/documents.json. Files are parsed one after another, each in
its own child process, as a source sync or `POST /index/files` does with one parse worker.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from bench.common import RESULTS, ROOT, write_result
from ragengine.filetypes import Extracted, to_document
from tests.support import corpus

# Pages of known text for the OCR error rate: different sentences, sizes and a digit-heavy one.
OCR_PAGES = [
    ["Quarterly report of the northern warehouse", "Twelve crates of apples arrived on Monday",
     "The invoice is payable within thirty days"],
    ["Order 4471 shipped on 2024-03-18 to Oslo", "Total amount due: 1,284.50 EUR", "Reference ZRH-28 / RIX-29"],
    ["Meeting notes: the board approved the budget", "Next review is planned for the second quarter",
     "Questions go to the operations team"],
    ["Safety instructions for the loading dock", "Wear gloves and boots at all times",
     "Report every incident to the shift lead"],
    ["Customer feedback summary for March", "Delivery times improved by four days",
     "Packaging complaints dropped by half"],
    ["Inventory count of the Baltic site", "Osprey model 14: 212 units", "Puffin model 27: 96 units"],
]


def levenshtein(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def normalise(text: str) -> str:
    return " ".join(text.split())


def throughput(files: int) -> list[dict]:
    samples = {"docx": corpus.docx_bytes(), "pptx": corpus.pptx_bytes(), "xlsx": corpus.xlsx_bytes(),
               "csv": corpus.csv_bytes(), "pdf": corpus.pdf_table_bytes(), "pdf (scanned, OCR)": corpus.scanned_pdf_bytes(),
               "png (OCR)": corpus.png_bytes()}
    suffix = {"pdf (scanned, OCR)": "pdf", "png (OCR)": "png"}
    rows = []
    for fmt, data in samples.items():
        name = f"sample.{suffix.get(fmt, fmt)}"
        times = []
        units = 0
        for _ in range(files):
            start = time.perf_counter()
            found = to_document(name, data)
            times.append(time.perf_counter() - start)
            assert isinstance(found, Extracted), (fmt, found)
            units = max(1, len(found.sections))
        total = sum(times)
        rows.append({"format": fmt, "files": files, "bytes": len(data), "units_per_file": units,
                     "files_per_s": files / total, "units_per_s": files * units / total,
                     "p50_ms": statistics.median(times) * 1000})
    return rows


def ocr_error_rate(pages: int) -> dict:
    errors = chars = 0
    per_page = []
    for lines in OCR_PAGES[:pages]:
        found = to_document("page.png", corpus.png_bytes(lines))
        assert isinstance(found, Extracted), found
        truth, got = normalise(" ".join(lines)), normalise(found.text)
        e = levenshtein(got, truth)
        errors += e
        chars += len(truth)
        per_page.append(round(e / len(truth), 4))
    return {"pages": pages, "characters": chars, "errors": errors, "cer": errors / chars, "per_page": per_page}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rows = throughput(4 if args.quick else 12)
    ocr = ocr_error_rate(3 if args.quick else len(OCR_PAGES))
    print(f"{'format':<20} {'bytes':>8} {'units/file':>10} {'files/s':>8} {'units/s':>8} {'p50 ms':>8}")
    for r in rows:
        print(f"{r['format']:<20} {r['bytes']:>8} {r['units_per_file']:>10} {r['files_per_s']:>8.2f} "
              f"{r['units_per_s']:>8.2f} {r['p50_ms']:>8.0f}")
    print(f"OCR character error rate: {ocr['cer']:.2%} ({ocr['errors']} edits over {ocr['characters']} characters, "
          f"{ocr['pages']} pages; per page {ocr['per_page']})")
    out = RESULTS / "documents.json"
    write_result(out, {"throughput": rows, "ocr": ocr}, indent=1)
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
