//! Reading safetensors files with errors that name the file, instead of candle's bare messages.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{Device, Tensor};

use crate::error::{Error, Result};

/// Every tensor in the file at `path`, on `device`. A truncated file, a bad header or a tensor
/// whose byte range lies outside the file is an error naming `path`.
pub fn load(path: &Path, device: &Device) -> Result<HashMap<String, Tensor>> {
    let data = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    candle_core::safetensors::load_buffer(&data, device).map_err(|e| Error::Safetensors {
        path: path.to_path_buf(),
        detail: format!("not a valid safetensors file: {e}"),
    })
}
