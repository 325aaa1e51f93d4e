//! JPEG/PNG decoding (EXIF orientation applied), resizing to a model's input (stretch, letterbox or
//! centre crop) and the pixel → tensor conversion; [`Transform`] maps input pixels back to the picture.

use super::spec::{Color, ImageSpec, Layout, Resize};
use crate::error::{Error, Result};
use crate::model_api::types::DataType;
use fast_image_resize::images::{Image as FirImage, ImageRef};
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};
use image::{DynamicImage, ImageDecoder, ImageFormat, ImageReader, Limits, RgbImage};
use std::io::Cursor;

/// The largest picture side decoded.
pub const MAX_SIDE: u32 = 16384;
/// The most pixels decoded (64 Mpx).
pub const MAX_PIXELS: u64 = 64 * 1024 * 1024;

/// A picture format this module decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Jpeg,
    Png,
}

/// The picture format, from its magic bytes: `None` for anything but a JPEG or PNG. A payload is
/// sniffed once, where it arrives; [`decode`] takes the answer.
pub fn format_of(bytes: &[u8]) -> Option<Format> {
    if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some(Format::Jpeg)
    } else if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some(Format::Png)
    } else {
        None
    }
}

/// Decodes a JPEG or PNG (`format`, as [`format_of`] found it; `None` is a client error) into 8-bit
/// RGB, turned upright as its EXIF orientation says. Refuses pictures over [`MAX_SIDE`] a side or
/// [`MAX_PIXELS`] before decoding them.
pub fn decode(bytes: &[u8], format: Option<Format>) -> Result<RgbImage> {
    let format = format.ok_or_else(|| Error::invalid("the payload is not a JPEG or PNG image"))?;
    let (name, format) = match format {
        Format::Jpeg => ("JPEG", ImageFormat::Jpeg),
        Format::Png => ("PNG", ImageFormat::Png),
    };
    let cannot = |e: image::ImageError| Error::invalid(format!("cannot decode the {name} image: {e}"));
    let mut reader = ImageReader::with_format(Cursor::new(bytes), format);
    let mut limits = Limits::default();
    limits.max_image_width = Some(MAX_SIDE);
    limits.max_image_height = Some(MAX_SIDE);
    // 16-bit RGBA PNGs take 8 bytes a pixel while decoding.
    limits.max_alloc = Some(MAX_PIXELS * 8);
    reader.limits(limits);
    let mut decoder = reader.into_decoder().map_err(cannot)?;
    let (w, h) = decoder.dimensions();
    if w == 0 || h == 0 || w > MAX_SIDE || h > MAX_SIDE || u64::from(w) * u64::from(h) > MAX_PIXELS {
        return Err(Error::invalid(format!(
            "the {name} image is {w}x{h}; at most {MAX_SIDE} pixels a side and {} megapixels are accepted",
            MAX_PIXELS >> 20
        )));
    }
    // A broken EXIF block does not make the picture unusable: it is shown as stored.
    let orientation = decoder.orientation().unwrap_or(image::metadata::Orientation::NoTransforms);
    let mut img = DynamicImage::from_decoder(decoder).map_err(cannot)?;
    img.apply_orientation(orientation);
    Ok(match img {
        DynamicImage::ImageRgb8(rgb) => rgb,
        other => other.into_rgb8(),
    })
}

/// Maps the model input's pixel coordinates back to the picture's: `x = x_in * kx + bx`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Transform {
    pub kx: f32,
    pub bx: f32,
    pub ky: f32,
    pub by: f32,
}

impl Transform {
    pub fn to_original(&self, x: f32, y: f32) -> (f32, f32) {
        (x * self.kx + self.bx, y * self.ky + self.by)
    }

    /// The inverse: picture pixels → input pixels.
    pub fn to_input(&self, x: f32, y: f32) -> (f32, f32) {
        ((x - self.bx) / self.kx, (y - self.by) / self.ky)
    }
}

/// Where a picture of `w`x`h` lands in the input: the source rectangle read (left, top, width, height,
/// in picture pixels), the destination rectangle written (left, top, width, height, in input pixels)
/// and the transform back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Placement {
    pub src: (f64, f64, f64, f64),
    pub dst: (u32, u32, u32, u32),
    pub transform: Transform,
}

/// Plans the resize of a `w`x`h` picture into an `in_w`x`in_h` input.
pub fn place(resize: Resize, w: u32, h: u32, in_w: u32, in_h: u32) -> Placement {
    let (wf, hf, iwf, ihf) = (f64::from(w), f64::from(h), f64::from(in_w), f64::from(in_h));
    match resize {
        Resize::Stretch => Placement {
            src: (0.0, 0.0, wf, hf),
            dst: (0, 0, in_w, in_h),
            transform: Transform { kx: (wf / iwf) as f32, bx: 0.0, ky: (hf / ihf) as f32, by: 0.0 },
        },
        Resize::Letterbox => {
            let r = (iwf / wf).min(ihf / hf);
            let nw = ((wf * r).round() as u32).clamp(1, in_w);
            let nh = ((hf * r).round() as u32).clamp(1, in_h);
            let (left, top) = ((in_w - nw) / 2, (in_h - nh) / 2);
            let (kx, ky) = (wf / f64::from(nw), hf / f64::from(nh));
            Placement {
                src: (0.0, 0.0, wf, hf),
                dst: (left, top, nw, nh),
                transform: Transform {
                    kx: kx as f32,
                    bx: (-f64::from(left) * kx) as f32,
                    ky: ky as f32,
                    by: (-f64::from(top) * ky) as f32,
                },
            }
        }
        Resize::CenterCrop => {
            let r = (iwf / wf).max(ihf / hf);
            let (cw, ch) = ((iwf / r).min(wf), (ihf / r).min(hf));
            let (left, top) = ((wf - cw) / 2.0, (hf - ch) / 2.0);
            Placement {
                src: (left, top, cw, ch),
                dst: (0, 0, in_w, in_h),
                transform: Transform { kx: (cw / iwf) as f32, bx: left as f32, ky: (ch / ihf) as f32, by: top as f32 },
            }
        }
    }
}

/// Resizes `img` into the spec's input size as 8-bit RGB (letterbox padding included).
pub fn resize(img: &RgbImage, spec: &ImageSpec) -> Result<(RgbImage, Transform)> {
    let (w, h) = img.dimensions();
    let p = place(spec.resize, w, h, spec.width, spec.height);
    let (dl, dt, dw, dh) = p.dst;
    let same = p.src == (0.0, 0.0, f64::from(w), f64::from(h)) && (dw, dh) == (w, h);
    let resized: RgbImage = if same {
        img.clone()
    } else {
        let failed = |e: &dyn std::fmt::Display| Error::internal(format!("resizing the image failed: {e}"));
        let src = ImageRef::new(w, h, img.as_raw(), PixelType::U8x3).map_err(|e| failed(&e))?;
        let mut dst = FirImage::new(dw, dh, PixelType::U8x3);
        let (sl, st, sw, sh) = p.src;
        let options =
            ResizeOptions::new().resize_alg(ResizeAlg::Convolution(FilterType::Bilinear)).crop(sl, st, sw, sh);
        Resizer::new().resize(&src, &mut dst, &options).map_err(|e| failed(&e))?;
        RgbImage::from_raw(dw, dh, dst.into_vec()).ok_or_else(|| failed(&"the resized buffer has the wrong size"))?
    };
    if (dw, dh) == (spec.width, spec.height) {
        return Ok((resized, p.transform));
    }
    let mut canvas = RgbImage::from_pixel(spec.width, spec.height, image::Rgb([spec.pad; 3]));
    let row = dw as usize * 3;
    let stride = spec.width as usize * 3;
    let canvas_buf: &mut [u8] = &mut canvas;
    for (y, src_row) in resized.as_raw().chunks_exact(row).enumerate() {
        let start = (dt as usize + y) * stride + dl as usize * 3;
        canvas_buf[start..start + row].copy_from_slice(src_row);
    }
    Ok((canvas, p.transform))
}

/// Converts an input-sized RGB picture to the input tensor's bytes: channel order, `(x * scale - mean)
/// / std`, layout and datatype as the spec says.
pub fn to_tensor(img: &RgbImage, spec: &ImageSpec) -> Vec<u8> {
    // One table per model channel: the value of each 0..255 pixel.
    let source: [usize; 3] = match spec.color {
        Color::Rgb => [0, 1, 2],
        Color::Bgr => [2, 1, 0],
    };
    let lut: Vec<[f32; 256]> =
        (0..3).map(|c| std::array::from_fn(|v| (v as f32 * spec.scale - spec.mean[c]) / spec.std[c])).collect();
    let pixels = img.as_raw();
    let n = pixels.len() / 3;
    let value = |i: usize, c: usize| lut[c][pixels[i * 3 + source[c]] as usize];
    // Element order: NCHW walks each plane, NHWC interleaves.
    let order = |k: usize| match spec.layout {
        Layout::Nchw => (k % n, k / n),
        Layout::Nhwc => (k / 3, k % 3),
    };
    let count = n * 3;
    match spec.datatype {
        DataType::Uint8 => (0..count)
            .map(|k| {
                let (i, c) = order(k);
                value(i, c).round().clamp(0.0, 255.0) as u8
            })
            .collect(),
        DataType::Fp16 => {
            let mut out = Vec::with_capacity(count * 2);
            for k in 0..count {
                let (i, c) = order(k);
                out.extend_from_slice(&half::f16::from_f32(value(i, c)).to_le_bytes());
            }
            out
        }
        _ => {
            let mut out = Vec::with_capacity(count * 4);
            match spec.layout {
                Layout::Nchw => {
                    for (c, &s) in source.iter().enumerate() {
                        let table = &lut[c];
                        for px in pixels.chunks_exact(3) {
                            out.extend_from_slice(&table[px[s] as usize].to_le_bytes());
                        }
                    }
                }
                Layout::Nhwc => {
                    for px in pixels.chunks_exact(3) {
                        for (c, &s) in source.iter().enumerate() {
                            out.extend_from_slice(&lut[c][px[s] as usize].to_le_bytes());
                        }
                    }
                }
            }
            out
        }
    }
}
