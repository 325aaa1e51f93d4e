"""DeepStack-compatible image endpoints (issue 12): POST /v1/vision/detection (--deepstack-detection-model)
and POST /v1/vision/custom/<model>, posted as Frigate's deepstack detector does (multipart/form-data with
an `image` file and an `api_key` field, built by hand the way `requests` builds it), over the example
models image_detector and image_classifier and the pictures of tests/data/images/ (gen_images.py).

image_detector's boxes are constants in its 32x32 input (see gen_models.py), so the boxes in a
picture's pixels follow from the letterbox alone: for 320x240, box 0 is (80, 80)-(240, 160) and box 2
is (0, 200)-(80, 240) after clamping; box 1 overlaps box 0 and goes to NMS.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from helpers import copy_models

IMAGES = Path(__file__).resolve().parents[1] / "data" / "images"


def picture(name: str) -> bytes:
    return (IMAGES / name).read_bytes()


def multipart(files: dict, data: dict | None = None) -> tuple[bytes, dict]:
    """The body and headers `requests.post(url, files=files, data=data)` sends: the data fields first,
    then each file with its field name as the filename and no Content-Type of its own."""
    boundary = uuid.uuid4().hex
    body = b""
    for name, value in (data or {}).items():
        body += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n").encode()
    for name, content in files.items():
        body += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"; "
                 f"filename=\"{name}\"\r\n\r\n").encode() + content + b"\r\n"
    body += f"--{boundary}--\r\n".encode()
    return body, {"Content-Type": f"multipart/form-data; boundary={boundary}"}


def post_image(server, path: str, image: bytes, **fields):
    body, headers = multipart({"image": image}, {"api_key": "", **fields})
    return server.post(path, body=body, headers=headers)


@pytest.fixture(scope="module")
def image_repo(tmp_path_factory):
    return copy_models(tmp_path_factory.mktemp("repo"), "image_detector", "image_classifier", "simple")


@pytest.fixture(scope="module")
def deepstack(image_repo):
    from helpers import TritonServer

    s = TritonServer(["--model-repository", image_repo, "--deepstack-detection-model", "image_detector"],
                     name="deepstack")
    s.start()
    yield s
    s.stop()


def boxes(r) -> list[tuple]:
    assert r.status == 200, r
    body = r.json()
    assert body["success"] is True and body["duration"] == 0, body
    return [(p["label"], p["x_min"], p["y_min"], p["x_max"], p["y_max"]) for p in body["predictions"]]


def test_detection_boxes_are_in_picture_pixels(deepstack):
    r = post_image(deepstack, "/v1/vision/detection", picture("red_320x240.jpg"))
    body = r.json()
    assert boxes(r) == [("red", 80, 80, 240, 160), ("red", 0, 200, 80, 240)], body
    for p in body["predictions"]:
        assert all(isinstance(p[k], int) for k in ("x_min", "y_min", "x_max", "y_max")), p
    # Channel means of the letterboxed 32x32 input: 24 red rows and 8 rows of padding (114).
    red = (24 * 254 + 8 * 114) / 32 / 255
    assert body["predictions"][0]["confidence"] == pytest.approx(red, abs=0.01)
    assert body["predictions"][1]["confidence"] == pytest.approx(red / 2, abs=0.01)
    assert body["image"] == {"width": 320, "height": 240}
    # The custom endpoint runs the same model the same way.
    assert boxes(post_image(deepstack, "/v1/vision/custom/image_detector", picture("red_320x240.jpg"))) == boxes(r)


def test_min_confidence_field_overrides_the_threshold(deepstack):
    r = post_image(deepstack, "/v1/vision/detection", picture("red_320x240.jpg"), min_confidence="0.6")
    assert boxes(r) == [("red", 80, 80, 240, 160)]
    r = post_image(deepstack, "/v1/vision/detection", picture("red_320x240.jpg"), min_confidence="0.95")
    assert boxes(r) == []
    r = post_image(deepstack, "/v1/vision/detection", picture("red_320x240.jpg"), min_confidence="lots")
    assert r.status == 400 and "min_confidence" in r.json()["error"], r


def test_exif_orientation_is_honoured(deepstack):
    # Stored 320x240 with orientation 6: the picture is 240x320, letterboxed with 4 columns each side,
    # so box 0 is (40, 120)-(200, 200) in its pixels.
    r = post_image(deepstack, "/v1/vision/detection", picture("exif6_320x240.jpg"), min_confidence="0.3")
    assert [b[1:] for b in boxes(r)] == [(40, 120, 200, 200)], r.json()
    assert r.json()["image"] == {"width": 240, "height": 320}
    r = post_image(deepstack, "/v1/vision/custom/image_classifier", picture("exif6_320x240.jpg"))
    assert r.status == 200 and r.json()["image"] == {"width": 240, "height": 320}, r


def test_classification_of_solid_colours(deepstack):
    r = post_image(deepstack, "/v1/vision/custom/image_classifier", picture("red_64x48.jpg"))
    assert r.status == 200, r
    body = r.json()
    assert body["success"] is True and body["label"] == "red", body
    assert body["confidence"] == pytest.approx(1.0, abs=0.01)
    assert [p["label"] for p in body["predictions"]] == ["red", "green", "blue"][: len(body["predictions"])]
    r = post_image(deepstack, "/v1/vision/custom/image_classifier", picture("green_40x30.png"))
    body = r.json()
    # Lossless: every pixel is exactly green, so the scores are exact.
    assert body["label"] == "green" and body["confidence"] == 1.0, body
    assert body["predictions"] == [{"label": "green", "confidence": 1.0}, {"label": "red", "confidence": 0.0},
                                   {"label": "blue", "confidence": 0.0}]
    assert body["image"] == {"width": 40, "height": 30}


@pytest.mark.parametrize("case, status, needle", [
    ("corrupt", 400, "cannot decode the JPEG image"),
    ("not_an_image", 400, "not a JPEG or PNG image"),
    ("no_image_field", 400, "'image'"),
    ("not_multipart", 400, "multipart"),
    ("broken_multipart", 400, "multipart"),
    ("unknown_model", 404, "nope"),
    ("not_an_image_model", 400, "image.input"),
])
def test_errors_are_deepstack_json(deepstack, case, status, needle):
    path = "/v1/vision/detection"
    if case == "corrupt":
        r = post_image(deepstack, path, picture("corrupt.jpg"))
    elif case == "not_an_image":
        r = post_image(deepstack, path, b"GIF89a" + b"\0" * 32)
    elif case == "no_image_field":
        body, headers = multipart({"file": picture("red_64x48.jpg")}, {"api_key": ""})
        r = deepstack.post(path, body=body, headers=headers)
    elif case == "not_multipart":
        r = deepstack.post(path, body={"image": "aGVsbG8="})
    elif case == "broken_multipart":
        body, headers = multipart({"image": picture("red_64x48.jpg")})
        r = deepstack.post(path, body=body[: len(body) // 2] + b"\r\n--other--", headers=headers)
    elif case == "unknown_model":
        r = post_image(deepstack, "/v1/vision/custom/nope", picture("red_64x48.jpg"))
    else:
        # `simple` has two INT32 inputs and no image parameters.
        r = post_image(deepstack, "/v1/vision/custom/simple", picture("red_64x48.jpg"))
    assert r.status == status, r
    body = r.json()
    assert body["success"] is False and body["duration"] == 0 and needle in body["error"], body
    # The server keeps serving.
    assert boxes(post_image(deepstack, path, picture("red_320x240.jpg")))[0] == ("red", 80, 80, 240, 160)
    assert deepstack.get("/v2/health/ready").status == 200


def test_detection_without_a_configured_model_says_which_flag(start_server, image_repo):
    s = start_server("--model-repository", image_repo)
    r = post_image(s, "/v1/vision/detection", picture("red_64x48.jpg"))
    assert r.status == 404, r
    assert r.json()["success"] is False and "--deepstack-detection-model" in r.json()["error"]
    # The custom endpoint needs no flag.
    assert post_image(s, "/v1/vision/custom/image_classifier", picture("red_64x48.jpg")).json()["label"] == "red"


def test_restricted_inference_covers_the_deepstack_endpoints(start_server, image_repo):
    s = start_server("--model-repository", image_repo, "--deepstack-detection-model", "image_detector",
                     "--http-restricted-api=inference:infer-key=s3cret")
    assert post_image(s, "/v1/vision/detection", picture("red_64x48.jpg")).status == 403
    body, headers = multipart({"image": picture("red_320x240.jpg")})
    r = s.post("/v1/vision/detection", body=body, headers={**headers, "infer-key": "s3cret"})
    assert boxes(r)[0] == ("red", 80, 80, 240, 160)
