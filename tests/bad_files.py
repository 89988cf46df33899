"""Makers of broken PDFs, shared by the parser tests and the reliability suite."""

from __future__ import annotations

from pathlib import Path

import pymupdf


def zero_page_pdf() -> bytes:
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [] /Count 0 >>"]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def image_only_pdf(path: Path, pages: int = 2) -> None:
    doc = pymupdf.open()
    for _ in range(pages):
        page = doc.new_page()
        pix = pymupdf.Pixmap(pymupdf.csRGB, pymupdf.IRect(0, 0, 64, 64), False)
        pix.clear_with(200)
        page.insert_image(pymupdf.Rect(50, 50, 500, 700), pixmap=pix)
    doc.save(path)


def encrypted_pdf(path: Path) -> None:
    doc = pymupdf.open()
    doc.new_page().insert_text((72, 72), "A confidential paragraph with enough words to be a text layer. " * 3)
    doc.save(path, encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="user", owner_pw="owner")


