"""Writes the PDF and DOCX documents of the evaluation set (run once; outputs are committed).

.venv/bin/python tests/data/make_documents.py
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).parent / "policies"

CONDUCT_TITLE = "Code of Conduct"
CONDUCT = [
    (
        "1. Purpose",
        "This code describes how everyone at Halvorsen Instruments AS is expected to behave "
        "towards colleagues, customers, suppliers and the public. Breaches can lead to "
        "disciplinary action up to and including dismissal.",
    ),
    (
        "2. Gifts and Hospitality",
        "Employees may accept gifts from business partners only if their value is below NOK "
        "500 per year from the same partner. Gifts of cash or vouchers must always be "
        "declined. Every gift above NOK 200 must be recorded in the gift register.",
    ),
    (
        "3. Conflicts of Interest",
        "Declare any side job, board membership or ownership stake in a supplier or competitor "
        "to your manager and to the compliance officer before you start it. Family members may "
        "not be hired into a position that reports directly to you.",
    ),
    None,  # page break
    (
        "4. Whistleblowing",
        "Concerns about fraud, corruption or unsafe products can be reported anonymously "
        "through the external channel SpeakUp, which is run by an independent law firm. "
        "Retaliation against anyone who reports a concern in good faith is forbidden.",
    ),
    (
        "5. Harassment and Discrimination",
        "Bullying, sexual harassment and discrimination on any ground are not tolerated. "
        "Report incidents to your manager, to HR or to the safety representative; HR starts an "
        "investigation within five working days.",
    ),
    None,
    (
        "6. Use of Company Property",
        "Company tools, vehicles and laboratory equipment are for business use. Limited "
        "private use of the company phone and laptop is accepted as long as it does not "
        "disturb work or break the IT security guidelines.",
    ),
    (
        "7. Dress Code",
        "Office dress is smart casual. Safety shoes and protective glasses are mandatory in "
        "the production hall and the calibration laboratory.",
    ),
]

REMOTE_TITLE = "Remote Work Policy"
REMOTE = [
    (
        "Eligibility",
        "Employees who have passed their six-month probation period may work remotely up to "
        "three days a week, subject to agreement with their line manager. Production and "
        "laboratory roles are not eligible.",
    ),
    (
        "Core Hours",
        "Remote workers must be reachable on chat and phone between 10:00 and 14:00 Central "
        "European Time. Outside core hours working time is flexible.",
    ),
    (
        "Home Office Equipment",
        "The company provides a laptop, a monitor, a keyboard and a headset. A one-time "
        "stipend of NOK 4 000 can be claimed for an ergonomic chair or desk.",
    ),
    (
        "Working from Abroad",
        "Working from another country is allowed for at most 20 working days per year and "
        "must be approved in advance by HR because of tax and insurance rules.",
    ),
    (
        "Health and Safety at Home",
        "Complete the home workplace self-assessment form once a year. Injuries that happen "
        "while working at home must be reported like any other workplace accident.",
    ),
]
REMOTE_TABLE = [
    ("Country", "Monthly internet allowance", "Paid through"),
    ("Norway", "NOK 400", "salary"),
    ("Sweden", "SEK 400", "salary"),
    ("Germany", "EUR 35", "expense claim"),
]


def write_pdf(path: Path) -> None:
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import PageBreak, Paragraph, SimpleDocTemplate, Spacer

    styles = getSampleStyleSheet()
    story = [Paragraph(CONDUCT_TITLE, styles["Title"]), Spacer(1, 12)]
    for item in CONDUCT:
        if item is None:
            story.append(PageBreak())
            continue
        heading, body = item
        story += [Paragraph(heading, styles["Heading2"]), Paragraph(body, styles["BodyText"])]
    doc = SimpleDocTemplate(str(path), pagesize=A4, title=CONDUCT_TITLE, invariant=1)
    doc.build(story)


def write_docx(path: Path) -> None:
    import docx

    document = docx.Document()
    document.core_properties.title = REMOTE_TITLE
    document.add_heading(REMOTE_TITLE, level=0)
    document.add_paragraph(
        "This policy sets out when and how employees of Halvorsen Instruments AS may work "
        "from home or from another location."
    )
    for heading, body in REMOTE:
        document.add_heading(heading, level=1)
        document.add_paragraph(body)
    document.add_heading("Internet Allowance", level=1)
    table = document.add_table(rows=0, cols=3)
    for row in REMOTE_TABLE:
        cells = table.add_row().cells
        for cell, value in zip(cells, row, strict=True):
            cell.text = value
    document.save(str(path))


if __name__ == "__main__":
    write_pdf(HERE / "code_of_conduct.pdf")
    write_docx(HERE / "remote_work.docx")
