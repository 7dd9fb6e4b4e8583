"""The documents of issue 44 (citations that point to the right place), made by the formats' own
libraries in write mode as ``corpus.py`` makes its own: a DOCX handbook with a title, a sabbatical
section and a table section; a four-slide deck whose third slide's notes hold an answer; a three-page
PDF whose second page holds one. Each answer is known, and so is where it is."""

from __future__ import annotations

import io

HANDBOOK_TITLE = "Employee handbook"
SABBATICAL = "Sabbatical policy"
SABBATICAL_TEXT = (
    "Every employee with five years of service may take a paid sabbatical of twelve weeks. The sabbatical is "
    "planned with the team lead at least six months ahead, and the salary continues in full during it. A second "
    "sabbatical is possible after another five years.")
FIGURES = "Regional figures"
FIGURES_ROWS = [["Region", "Employees", "Sabbaticals taken"], ["North", "120", "4"], ["South", "85", "2"]]
SABBATICAL_QUESTION = "How long is the paid sabbatical?"

DECK_TITLES = ["Quarterly plan", "Hiring", "Launch date", "Budget"]
LAUNCH_NOTES = "The launch moves to the ninth of October because the supplier delivers the housings late."
LAUNCH_QUESTION = "When is the launch?"

PUMP_PAGES = [  # a section a page, each longer than a small part (index/structure.py), as real pages are
    ("Installation", "Mount the pump on a level concrete base and connect the inlet before the outlet. Use the "
                     "four anchor bolts supplied in the box and tighten them crosswise. Fill the housing with water "
                     "before the first start, or the seal runs dry and wears within hours."),
    ("Restarting the pump", "To restart the pump after a power cut, hold the red reset switch for ten seconds "
                            "until the green lamp blinks. If the lamp stays dark, check the fuse in the terminal box "
                            "first. The pump then runs at half speed for two minutes before it reaches full speed."),
    ("Maintenance", "Replace the filter cartridge every six months and check the seals once a year. Drain the "
                    "housing before a frost and store the pump indoors over the winter. Spare parts are listed on "
                    "the last page of the warranty card."),
]
PUMP_NOTICE = ("Keep this manual next to the pump. The warranty covers parts and labour for two years when the pump "
               "is installed and serviced as described here; it does not cover damage from frost or dry running. "
               "Report a fault to the service desk with the serial number from the type plate on the housing, the "
               "date of installation and a short description of what happened, so that a technician can bring "
               "the right parts on the first visit.")
PUMP_QUESTION = "How do I restart the pump after a power cut?"


def handbook_docx() -> bytes:
    import docx

    doc = docx.Document()
    doc.add_paragraph(HANDBOOK_TITLE, style="Title")
    doc.add_heading(SABBATICAL, level=1)
    doc.add_paragraph(SABBATICAL_TEXT)
    doc.add_heading(FIGURES, level=1)
    table = doc.add_table(rows=0, cols=len(FIGURES_ROWS[0]))
    for row in FIGURES_ROWS:
        for cell, value in zip(table.add_row().cells, row, strict=True):
            cell.text = value
    out = io.BytesIO()
    doc.save(out)
    return out.getvalue()


def launch_pptx() -> bytes:
    from pptx import Presentation

    deck = Presentation()
    for i, title in enumerate(DECK_TITLES, 1):
        slide = deck.slides.add_slide(deck.slide_layouts[1])  # title and content
        slide.shapes.title.text = title
        slide.placeholders[1].text_frame.text = f"Status of {title.lower()} for the third quarter."
        if i == 3:
            slide.notes_slide.notes_text_frame.text = LAUNCH_NOTES
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def pump_pdf() -> bytes:
    """One section a page: a heading (reportlab's Heading1, larger than the body) and its paragraph."""
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import PageBreak, Paragraph, SimpleDocTemplate

    styles = getSampleStyleSheet()
    story: list = []
    for i, (heading, text) in enumerate(PUMP_PAGES):
        if i:
            story.append(PageBreak())
        story += [Paragraph(heading, styles["Heading1"]), Paragraph(text, styles["BodyText"]),
                  Paragraph(PUMP_NOTICE, styles["BodyText"])]
    out = io.BytesIO()
    SimpleDocTemplate(out, pagesize=A4, title="Pump manual").build(story)
    return out.getvalue()
