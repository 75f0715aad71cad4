#!/usr/bin/python3
"""make_image_fixtures.py: writes the encoded images of tests/test_ops_image_decode.c
and what PIL decodes from them (ONNX's ImageDecoder reference decodes with PIL).

    /usr/bin/python3 tools/make_image_fixtures.py tests/data/images

For each fixture NAME.EXT it writes NAME.EXT.rgb (convert("RGB"), H*W*3 bytes)
and NAME.EXT.gray (convert("L"), H*W bytes), and lists "NAME.EXT W H" in
MANIFEST. Needs Debian's python3-pil (the same libjpeg-turbo, libpng, libwebp,
libtiff and OpenJPEG as keel). The picture is 13 x 9 (odd sizes exercise
chroma subsampling edges) with smooth gradients and hard edges.
"""
import io
import os
import sys

from PIL import Image

W, H = 13, 9


def picture():
    im = Image.new("RGB", (W, H))
    px = im.load()
    for y in range(H):
        for x in range(W):
            px[x, y] = ((x * 19 + y * 7) % 256, (y * 29) % 256, 255 - x * 17 if x < 7 else (x * y * 11) % 256)
    return im


def encode(im, fmt, **kw):
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def plain_pnm(im, kind):
    """P1 / P2 / P3 written by hand (PIL writes only the binary forms)."""
    w, h = im.size
    if kind == 1:
        bits = im.convert("1").load()
        body = " ".join("1" if bits[x, y] == 0 else "0" for y in range(h) for x in range(w))
        return f"P1\n# plain bitmap\n{w} {h}\n{body}\n".encode()
    if kind == 2:
        g = im.convert("L").load()
        body = " ".join(str(g[x, y] * 100 // 255) for y in range(h) for x in range(w))
        return f"P2\n{w} {h}\n100\n{body}\n".encode()  # maxval 100: scaled to 8 bits, rounded
    p = im.load()
    body = "\n".join(" ".join(f"{p[x, y][0]} {p[x, y][1]} {p[x, y][2]}" for x in range(w)) for y in range(h))
    return f"P3\n{w} {h}\n255\n{body}\n".encode()


def fixtures():
    im = picture()
    rgba = im.copy()
    rgba.putalpha(Image.linear_gradient("L").resize((W, H)))
    return {
        "rgb.jpg": encode(im, "JPEG", quality=90),
        "progressive.jpg": encode(im, "JPEG", quality=75, progressive=True),
        "gray.jpg": encode(im.convert("L"), "JPEG", quality=90),
        "rgb.png": encode(im, "PNG"),
        "rgba.png": encode(rgba, "PNG"),
        "gray.png": encode(im.convert("L"), "PNG"),
        "palette.png": encode(im.convert("P", palette=Image.ADAPTIVE, colors=16), "PNG"),
        # 16-bit gray v * 257: keel keeps the high byte (libpng's strip_16), v
        # again; PIL's convert("L") clips I;16 at 255 instead, so the expected
        # pixels come from the 8-bit picture (see REFERENCE below)
        "gray16.png": encode(im.convert("L").convert("I").point(lambda v: v * 257).convert("I;16"), "PNG"),
        "bits.png": encode(im.convert("1"), "PNG"),
        "rgb.bmp": encode(im, "BMP"),
        "palette.bmp": encode(im.convert("P", palette=Image.ADAPTIVE, colors=16), "BMP"),
        "bits.bmp": encode(im.convert("1"), "BMP"),
        "gray.bmp": encode(im.convert("L"), "BMP"),
        "rgb.ppm": encode(im, "PPM"),
        "gray.pgm": encode(im.convert("L"), "PPM"),
        "bits.pbm": encode(im.convert("1"), "PPM"),
        "plain.ppm": plain_pnm(im, 3),
        "plain.pgm": plain_pnm(im, 2),
        "plain.pbm": plain_pnm(im, 1),
        "rgb.tif": encode(im, "TIFF"),
        "lzw.tif": encode(im, "TIFF", compression="tiff_lzw"),
        "gray.tif": encode(im.convert("L"), "TIFF", compression="tiff_adobe_deflate"),
        "lossy.webp": encode(im, "WEBP", quality=80),
        "lossless.webp": encode(im, "WEBP", lossless=True),
        "rgb.jp2": encode(im, "JPEG2000"),
        "rgb.j2k": encode(im, "JPEG2000", irreversible=True, quality_mode="rates", quality_layers=[20]),
    }


# Fixtures whose expected pixels are not PIL's decode of the file itself.
REFERENCE = {"gray16.png": lambda: picture().convert("L")}


def main(out):
    os.makedirs(out, exist_ok=True)
    lines = []
    for name, data in fixtures().items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
        img = REFERENCE[name]() if name in REFERENCE else Image.open(io.BytesIO(data))
        img.load()
        with open(os.path.join(out, name + ".rgb"), "wb") as f:
            f.write(img.convert("RGB").tobytes())
        with open(os.path.join(out, name + ".gray"), "wb") as f:
            f.write(img.convert("L").tobytes())
        lines.append(f"{name} {img.size[0]} {img.size[1]}")
    with open(os.path.join(out, "MANIFEST"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/images")
