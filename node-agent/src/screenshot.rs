//! VNC screenshots (`virtctl vnc screenshot`): libvirt's `virDomainScreenshot` of the primary display, answered as
//! PNG. The launcher's libvirt asks QEMU's screendump for PNG (passed through); a libvirt or QEMU without that gives
//! binary PPM (`P6`), re-encoded here, since upstream's clients write the bytes to a `.png` file as they come.
//!
//! The pixels come from the guest's display and the header from QEMU, both treated as untrusted: dimensions are
//! bounded ([`MAX_SIDE`]) and the data length must match them exactly.

/// The MIME type of PNG (what the node API answers).
pub const PNG: &str = contracts::kubevirt::node_api::SCREENSHOT_TYPE;
/// The MIME type libvirt names for a PPM.
pub const PPM: &str = "image/x-portable-pixmap";
/// Largest width or height accepted (QEMU's displays stop well below it).
pub const MAX_SIDE: u32 = 16384;

/// A screenshot that cannot be turned into a PNG.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// libvirt named a format this module does not know.
    #[error("the screenshot is {0}, neither PNG nor PPM")]
    Format(String),
    /// The PPM's header or data is malformed.
    #[error("malformed PPM screenshot: {0}")]
    Ppm(&'static str),
    /// The PNG encoder failed.
    #[error("encoding the screenshot as PNG: {0}")]
    Encode(String),
}

/// `data` of type `mime` as a PNG: passed through when it is one, re-encoded from a binary PPM.
pub fn to_png(mime: &str, data: Vec<u8>) -> Result<Vec<u8>, Error> {
    match mime {
        PNG => Ok(data),
        PPM => {
            let (width, height, pixels) = parse_ppm(&data)?;
            encode_png(width, height, pixels)
        }
        other => Err(Error::Format(other.to_owned())),
    }
}

/// Width, height and RGB bytes of a binary PPM (`P6`, maxval ≤ 255).
fn parse_ppm(data: &[u8]) -> Result<(u32, u32, &[u8]), Error> {
    let rest = data.strip_prefix(b"P6").ok_or(Error::Ppm("no P6 magic"))?;
    let mut pos = 0;
    let mut fields = [0u32; 3];
    for field in &mut fields {
        // Whitespace and comments before each field.
        loop {
            match rest.get(pos) {
                Some(b) if b.is_ascii_whitespace() => pos += 1,
                Some(b'#') => {
                    while rest.get(pos).is_some_and(|b| *b != b'\n') {
                        pos += 1;
                    }
                }
                _ => break,
            }
        }
        let start = pos;
        while rest.get(pos).is_some_and(u8::is_ascii_digit) {
            pos += 1;
        }
        let digits = std::str::from_utf8(&rest[start..pos]).map_err(|_| Error::Ppm("bad number"))?;
        *field = digits.parse().map_err(|_| Error::Ppm("missing or oversized number"))?;
    }
    // Exactly one whitespace byte separates the header from the pixels.
    if !rest.get(pos).is_some_and(u8::is_ascii_whitespace) {
        return Err(Error::Ppm("no whitespace after the header"));
    }
    let [width, height, maxval] = fields;
    if width == 0 || height == 0 || width > MAX_SIDE || height > MAX_SIDE {
        return Err(Error::Ppm("dimensions out of range"));
    }
    if maxval == 0 || maxval > 255 {
        return Err(Error::Ppm("only 8-bit samples are supported"));
    }
    let pixels = &rest[pos + 1..];
    let expected = u64::from(width) * u64::from(height) * 3;
    if pixels.len() as u64 != expected {
        return Err(Error::Ppm("pixel data does not match the dimensions"));
    }
    Ok((width, height, pixels))
}

fn encode_png(width: u32, height: u32, pixels: &[u8]) -> Result<Vec<u8>, Error> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().map_err(|e| Error::Encode(e.to_string()))?;
    writer.write_image_data(pixels).map_err(|e| Error::Encode(e.to_string()))?;
    writer.finish().map_err(|e| Error::Encode(e.to_string()))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ppm(header: &str, pixels: &[u8]) -> Vec<u8> {
        let mut v = header.as_bytes().to_vec();
        v.extend_from_slice(pixels);
        v
    }

    #[test]
    fn a_ppm_becomes_a_png_with_the_same_pixels() -> Result<(), Error> {
        let pixels = [255, 0, 0, 0, 255, 0, 0, 0, 255, 1, 2, 3, 4, 5, 6, 7, 8, 9];
        let png = to_png(PPM, ppm("P6\n# QEMU\n3 2\n255\n", &pixels))?;
        let decoder = png::Decoder::new(std::io::Cursor::new(png));
        let mut reader = decoder.read_info().map_err(|e| Error::Encode(e.to_string()))?;
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).map_err(|e| Error::Encode(e.to_string()))?;
        assert_eq!((info.width, info.height, info.color_type), (3, 2, png::ColorType::Rgb));
        assert_eq!(&buf[..info.buffer_size()], &pixels);
        Ok(())
    }

    #[test]
    fn a_png_passes_and_anything_else_is_refused() {
        assert_eq!(to_png(PNG, b"\x89PNG".to_vec()), Ok(b"\x89PNG".to_vec()));
        assert_eq!(to_png("image/bmp", Vec::new()), Err(Error::Format("image/bmp".into())));
    }

    #[test]
    fn hostile_ppms_are_refused_without_allocating() {
        for (data, why) in [
            (ppm("P5\n1 1\n255\n", &[0]), "no P6 magic"),
            (ppm("P6\n1 1\n255\n", &[0, 0]), "pixel data does not match the dimensions"),
            (ppm("P6\n2 1\n255\n", &[0, 0, 0]), "pixel data does not match the dimensions"),
            (ppm("P6\n16385 1\n255\n", &[]), "dimensions out of range"),
            (ppm("P6\n0 1\n255\n", &[]), "dimensions out of range"),
            (ppm("P6\n99999999999 1\n255\n", &[]), "missing or oversized number"),
            (ppm("P6\n1 1\n65535\n", &[0; 6]), "only 8-bit samples are supported"),
            (ppm("P6\n1 1\n255", &[]), "no whitespace after the header"),
            (ppm("P6\n1", &[]), "missing or oversized number"),
            (ppm("P6 # only a comment", &[]), "missing or oversized number"),
        ] {
            assert_eq!(to_png(PPM, data), Err(Error::Ppm(why)), "{why}");
        }
    }
}
