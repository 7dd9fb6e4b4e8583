"""The document test corpus (issue 29), generated with the formats' own libraries in write mode:
DOCX (python-docx), PPTX (python-pptx) and XLSX (openpyxl) with known tables, PDFs with ruled
tables (reportlab), a scanned page (known text rendered to an image by Pillow, then wrapped in a PDF
with no text layer), and broken files (truncated archives, a zip bomb, an encrypted PDF).

Nothing binary is committed: tests and bench/bench_documents.py build what they need in memory.
``TABLE`` is the known table every format carries; ``QUESTIONS`` ask for one of its cells.
"""

from __future__ import annotations

import io
import zipfile
from functools import cache
from pathlib import Path

# A price list: each row's values are unique words, so a question names exactly one row.
TABLE_HEADER = ["Product", "Region", "Price (EUR)", "Warehouse"]
TABLE = [TABLE_HEADER] + [
    [f"{name} model {i}", region, f"{100 + 7 * i}", f"{wh}-{i:02d}"]
    for i, (name, region, wh) in enumerate(
        [(n, r, w) for n in ("Falcon", "Heron", "Osprey", "Kestrel", "Puffin") for r, w in
         (("Nordic", "OSL"), ("Iberia", "MAD"), ("Balkans", "SOF"), ("Alpine", "ZRH"), ("Baltic", "RIX"),
          ("Benelux", "AMS"))], 1)
]  # 30 rows: large enough that a small chunk size must split it
QUESTIONS = [  # (question, the row of TABLE it is about)
    (f"What is the price of the {TABLE[14][0]} in {TABLE[14][1]}?", 14),
    (f"Which warehouse stocks the {TABLE[27][0]}?", 27),
    (f"How much does the {TABLE[5][0]} cost in {TABLE[5][1]}?", 5),
]
DOC_TITLE = "Quarterly price list"
SECTION = "Prices by region"
INTRO = "This document lists the prices agreed for the northern season."
CAPTION = "Table 1: Prices per product and region"
SCANNED_TEXT = [
    "Scanned invoice from the archive",
    "The delivery of twelve crates arrived on Monday",
    "Payment is due within thirty days of receipt",
]


def docx_bytes() -> bytes:
    import docx

    doc = docx.Document()
    doc.core_properties.title = DOC_TITLE
    doc.add_heading(SECTION, level=1)
    doc.add_paragraph(INTRO)
    doc.add_paragraph("Delivery terms", style="List Bullet")
    doc.add_paragraph("Payment terms", style="List Bullet")
    doc.add_heading("The table", level=2)
    doc.add_paragraph(CAPTION, style="Caption")
    table = doc.add_table(rows=0, cols=len(TABLE_HEADER))
    for row in TABLE:
        cells = table.add_row().cells
        for cell, value in zip(cells, row, strict=True):
            cell.text = value
    doc.add_paragraph("Prices exclude VAT.")
    out = io.BytesIO()
    doc.save(out)
    return out.getvalue()


def pptx_bytes() -> bytes:
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    deck.core_properties.title = DOC_TITLE
    first = deck.slides.add_slide(deck.slide_layouts[1])  # title and content
    first.shapes.title.text = "Season overview"
    first.placeholders[1].text_frame.text = INTRO
    first.notes_slide.notes_text_frame.text = "Mention the new Baltic warehouse."
    second = deck.slides.add_slide(deck.slide_layouts[5])  # title only
    second.shapes.title.text = SECTION
    rows = TABLE[:8]
    shape = second.shapes.add_table(len(rows), len(TABLE_HEADER), Inches(0.5), Inches(1.5), Inches(9), Inches(4))
    for r, row in enumerate(rows):
        for c, value in enumerate(row):
            shape.table.cell(r, c).text = value
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def xlsx_bytes() -> bytes:
    from openpyxl import Workbook

    book = Workbook()
    sheet = book.active
    sheet.title = "Prices"
    for row in TABLE:
        sheet.append([int(v) if v.isdigit() else v for v in row])
    notes = book.create_sheet("Notes")
    notes.append(["Key", "Value"])
    notes.append(["Currency", "EUR"])
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def csv_bytes() -> bytes:
    return "\n".join(",".join(f'"{v}"' if "," in v else v for v in row) for row in TABLE).encode()


def pdf_table_bytes(rows: list[list[str]] | None = None) -> bytes:
    """A one-page PDF: a heading, a paragraph, the caption and a ruled table (reportlab's grid)."""
    from reportlab.lib import colors
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import Paragraph, SimpleDocTemplate, Table, TableStyle

    styles = getSampleStyleSheet()
    out = io.BytesIO()
    story = [Paragraph(SECTION, styles["Heading1"]), Paragraph(INTRO, styles["BodyText"]),
             Paragraph(CAPTION, styles["BodyText"])]
    table = Table(rows or TABLE[:16])
    table.setStyle(TableStyle([("GRID", (0, 0), (-1, -1), 0.5, colors.black), ("FONTSIZE", (0, 0), (-1, -1), 8)]))
    story.append(table)
    SimpleDocTemplate(out, pagesize=A4, title=DOC_TITLE).build(story)
    return out.getvalue()


def scanned_page_image(lines: list[str] | None = None, scale: int = 3):
    """Known text drawn on a white page (Pillow's bundled font, scaled up like a 300 dpi scan)."""
    from PIL import Image, ImageDraw, ImageFont

    lines = lines or SCANNED_TEXT
    font = ImageFont.load_default(size=14 * scale)
    image = Image.new("L", (900 * scale // 2, (60 + 40 * len(lines)) * scale // 2), 255)
    draw = ImageDraw.Draw(image)
    for i, line in enumerate(lines):
        draw.text((30 * scale // 2, (30 + 40 * i) * scale // 2), line, fill=0, font=font)
    return image


def png_bytes(lines: list[str] | None = None) -> bytes:
    out = io.BytesIO()
    scanned_page_image(lines).save(out, format="PNG")
    return out.getvalue()


def scanned_pdf_bytes(pages: int = 1) -> bytes:
    """A PDF whose pages are only images (no text layer), as a scanner makes them."""
    from reportlab.lib.utils import ImageReader
    from reportlab.pdfgen import canvas

    image = scanned_page_image()
    out = io.BytesIO()
    pdf = canvas.Canvas(out, pagesize=(image.width / 3, image.height / 3))
    for _ in range(pages):
        pdf.drawImage(ImageReader(image), 0, 0, width=image.width / 3, height=image.height / 3)
        pdf.showPage()
    pdf.save()
    return out.getvalue()


def mixed_pdf_bytes() -> bytes:
    """Page 1 has a text layer, page 2 is a scan: only page 2 may be OCR'd."""
    from reportlab.lib.utils import ImageReader
    from reportlab.pdfgen import canvas

    image = scanned_page_image()
    out = io.BytesIO()
    pdf = canvas.Canvas(out)
    pdf.drawString(72, 720, INTRO)
    pdf.showPage()
    pdf.drawImage(ImageReader(image), 36, 400, width=image.width / 3, height=image.height / 3)
    pdf.showPage()
    pdf.save()
    return out.getvalue()


def encrypted_pdf_bytes() -> bytes:
    from reportlab.pdfgen import canvas

    out = io.BytesIO()
    pdf = canvas.Canvas(out, encrypt="owner-and-user-password")
    pdf.drawString(72, 720, "Secret figures")
    pdf.save()
    return out.getvalue()


def zip_bomb(suffix_member: str = "word/document.xml", inflated_mb: int = 600) -> bytes:
    """A DOCX-shaped archive whose one member inflates from about 0.6 MB to ``inflated_mb`` MiB."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        with archive.open(suffix_member, "w", force_zip64=True) as member:
            block = b"\0" * (1 << 20)
            for _ in range(inflated_mb):
                member.write(block)
    return out.getvalue()


def many_members(count: int = 20_000) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        for i in range(count):
            archive.writestr(f"m/{i}", b"")
    return out.getvalue()


@cache
def corpus() -> dict[str, bytes]:
    """Every good document of the corpus, by file name."""
    return {"prices.docx": docx_bytes(), "prices.pptx": pptx_bytes(), "prices.xlsx": xlsx_bytes(),
            "prices.csv": csv_bytes(), "prices.pdf": pdf_table_bytes(), "scan.png": png_bytes(),
            "scan.pdf": scanned_pdf_bytes()}


@cache
def broken() -> dict[str, bytes]:
    """Broken and hostile files, each of which must give a reason and nothing else."""
    good = docx_bytes()
    return {"truncated.docx": good[: len(good) // 2], "truncated.xlsx": xlsx_bytes()[:300],
            "bomb.docx": zip_bomb(), "members.pptx": many_members(), "locked.pdf": encrypted_pdf_bytes(),
            "garbage.pdf": b"%PDF-1.7\n" + bytes(range(256)) * 40,
            "password.docx": b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 512, "noise.png": b"\x89PNG\r\n\x1a\n" + b"\x00" * 64}


def write(folder: Path) -> list[Path]:
    """Write the corpus to ``folder`` (for a look, or ``ragengine index``)."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name, data in {**corpus(), **broken()}.items():
        (folder / name).write_bytes(data)
        out.append(folder / name)
    return out


if __name__ == "__main__":
    import sys

    for path in write(Path(sys.argv[1] if len(sys.argv) > 1 else "corpus")):
        print(path)
