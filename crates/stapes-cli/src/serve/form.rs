//! The multipart form of `/v1/audio/transcriptions` and `/translations`: read, then validated
//! as a whole before any audio is decoded or any model is touched, so bad requests are cheap.

use super::errors::ApiError;
use axum::extract::multipart::{Multipart, MultipartError};
use axum::http::StatusCode;

#[derive(Debug, Default)]
pub struct Upload {
    pub bytes: Vec<u8>,
    pub filename: Option<String>,
}

/// The form's fields as sent; unknown fields are ignored, as OpenAI clients send extras.
#[derive(Debug, Default)]
pub struct RawForm {
    pub file: Option<Upload>,
    pub model: Option<String>,
    pub language: Option<String>,
    pub prompt: Option<String>,
    pub response_format: Option<String>,
    pub temperature: Option<String>,
    pub granularities: Vec<String>,
    pub stream: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponseFormat {
    Json,
    Text,
    Srt,
    Vtt,
    VerboseJson,
}

impl ResponseFormat {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "json" => Self::Json,
            "text" => Self::Text,
            "srt" => Self::Srt,
            "vtt" => Self::Vtt,
            "verbose_json" => Self::VerboseJson,
            _ => return None,
        })
    }
}

/// A validated request.
#[derive(Debug)]
pub struct Request {
    pub file: Upload,
    pub model: Option<String>,
    pub language: Option<String>,
    pub prompt: Option<String>,
    pub format: ResponseFormat,
    /// `None` = the fallback schedule (OpenAI: 0 or absent lets the model raise it).
    pub temperature: Option<f32>,
    pub words: bool,
    /// Segments in verbose_json: on unless granularities were given without `segment`.
    pub segments: bool,
    pub stream: bool,
}

pub fn multipart_error(e: MultipartError) -> ApiError {
    match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::too_large(
            None,
            "request_too_large",
            "the request body is larger than the server accepts (--max-body-mb)",
        ),
        // Anything else is a malformed or aborted upload: the client's side.
        _ => ApiError::invalid(
            None,
            "invalid_multipart",
            format!("{}: {}", e, e.body_text()),
        ),
    }
}

pub async fn read(mut mp: Multipart) -> Result<RawForm, ApiError> {
    let mut form = RawForm::default();
    while let Some(field) = mp.next_field().await.map_err(multipart_error)? {
        let name = field.name().unwrap_or_default().to_owned();
        if name == "file" {
            if form.file.is_some() {
                return Err(ApiError::invalid(
                    Some("file"),
                    "invalid_value",
                    "send one `file` per request",
                ));
            }
            let filename = field.file_name().map(str::to_owned);
            let bytes = field.bytes().await.map_err(multipart_error)?;
            form.file = Some(Upload {
                bytes: bytes.into(),
                filename,
            });
            continue;
        }
        let slot = match name.as_str() {
            "model" => &mut form.model,
            "language" => &mut form.language,
            "prompt" => &mut form.prompt,
            "response_format" => &mut form.response_format,
            "temperature" => &mut form.temperature,
            "stream" => &mut form.stream,
            "timestamp_granularities[]" | "timestamp_granularities" => {
                let v = field.text().await.map_err(multipart_error)?;
                form.granularities.push(v);
                continue;
            }
            // Unread fields are skipped by the parser when the next one is asked for.
            _ => continue,
        };
        *slot = Some(field.text().await.map_err(multipart_error)?);
    }
    Ok(form)
}

fn non_empty(v: Option<String>) -> Option<String> {
    v.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty())
}

pub fn validate(form: RawForm) -> Result<Request, ApiError> {
    let file = match form.file {
        Some(f) if !f.bytes.is_empty() => f,
        Some(_) => {
            return Err(ApiError::invalid(
                Some("file"),
                "empty_file",
                "the uploaded `file` is empty",
            ))
        }
        None => {
            return Err(ApiError::invalid(
                Some("file"),
                "missing_file",
                "the multipart form has no `file` field (the audio to transcribe)",
            ))
        }
    };
    let format = match non_empty(form.response_format) {
        None => ResponseFormat::Json,
        Some(f) => ResponseFormat::parse(&f).ok_or_else(|| {
            ApiError::invalid(
                Some("response_format"),
                "invalid_value",
                format!(
                    "unknown response_format `{f}` (expected json, text, srt, vtt or verbose_json)"
                ),
            )
        })?,
    };
    let temperature = match non_empty(form.temperature) {
        None => None,
        Some(t) => match t.parse::<f32>() {
            Ok(v) if (0.0..=1.0).contains(&v) => (v > 0.0).then_some(v),
            _ => {
                return Err(ApiError::invalid(
                    Some("temperature"),
                    "invalid_value",
                    format!("temperature `{t}` is not a number between 0 and 1"),
                ))
            }
        },
    };
    let language = match non_empty(form.language).map(|l| l.to_ascii_lowercase()) {
        None => None,
        Some(l) if l == "auto" => None,
        Some(l) if (2..=3).contains(&l.len()) && l.bytes().all(|b| b.is_ascii_lowercase()) => {
            Some(l)
        }
        Some(l) => {
            return Err(ApiError::invalid(
                Some("language"),
                "invalid_value",
                format!("language `{l}` is not an ISO-639-1 code such as `en`"),
            ))
        }
    };
    let (mut words, mut segments) = (false, form.granularities.is_empty());
    for g in &form.granularities {
        match g.trim() {
            "word" => words = true,
            "segment" => segments = true,
            other => {
                return Err(ApiError::invalid(
                    Some("timestamp_granularities"),
                    "invalid_value",
                    format!("unknown timestamp granularity `{other}` (expected word or segment)"),
                ))
            }
        }
    }
    let stream = match non_empty(form.stream)
        .map(|s| s.to_ascii_lowercase())
        .as_deref()
    {
        None | Some("false") | Some("0") => false,
        Some("true") | Some("1") => true,
        Some(other) => {
            return Err(ApiError::invalid(
                Some("stream"),
                "invalid_value",
                format!("stream `{other}` is not true or false"),
            ))
        }
    };
    Ok(Request {
        file,
        model: non_empty(form.model),
        language,
        // A prompt's leading space matters to Whisper's tokenizer; keep it as sent.
        prompt: form.prompt.filter(|p| !p.trim().is_empty()),
        format,
        temperature,
        words,
        segments,
        stream,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form() -> RawForm {
        RawForm {
            file: Some(Upload {
                bytes: vec![1, 2, 3],
                filename: Some("a.wav".into()),
            }),
            ..Default::default()
        }
    }

    fn param_of(f: RawForm) -> Option<&'static str> {
        validate(f).err().and_then(|e| e.param)
    }

    #[test]
    fn defaults() {
        let r = validate(form()).expect("valid");
        assert_eq!(r.format, ResponseFormat::Json);
        assert_eq!(
            (r.temperature, r.words, r.segments, r.stream),
            (None, false, true, false)
        );
        assert!(r.model.is_none() && r.language.is_none());
    }

    #[test]
    fn file_missing_or_empty() {
        let mut f = form();
        f.file = None;
        assert_eq!(validate(f).err().map(|e| e.code), Some("missing_file"));
        let mut f = form();
        f.file = Some(Upload::default());
        assert_eq!(validate(f).err().map(|e| e.code), Some("empty_file"));
    }

    #[test]
    fn fields_are_checked() {
        let with = |set: fn(&mut RawForm)| {
            let mut f = form();
            set(&mut f);
            f
        };
        assert_eq!(
            param_of(with(|f| f.response_format = Some("xml".into()))),
            Some("response_format")
        );
        assert_eq!(
            param_of(with(|f| f.temperature = Some("hot".into()))),
            Some("temperature")
        );
        assert_eq!(
            param_of(with(|f| f.temperature = Some("1.5".into()))),
            Some("temperature")
        );
        assert_eq!(
            param_of(with(|f| f.temperature = Some("NaN".into()))),
            Some("temperature")
        );
        assert_eq!(
            param_of(with(|f| f.language = Some("english!".into()))),
            Some("language")
        );
        assert_eq!(
            param_of(with(|f| f.granularities = vec!["char".into()])),
            Some("timestamp_granularities")
        );
        assert_eq!(
            param_of(with(|f| f.stream = Some("maybe".into()))),
            Some("stream")
        );
    }

    #[test]
    fn values_are_mapped() {
        let mut f = form();
        f.response_format = Some("verbose_json".into());
        f.temperature = Some("0.4".into());
        f.language = Some("EN".into());
        f.granularities = vec!["word".into()];
        f.stream = Some("True".into());
        f.model = Some(" tiny ".into());
        let r = validate(f).expect("valid");
        assert_eq!(r.format, ResponseFormat::VerboseJson);
        assert_eq!(r.temperature, Some(0.4));
        assert_eq!(r.language.as_deref(), Some("en"));
        assert_eq!((r.words, r.segments, r.stream), (true, false, true));
        assert_eq!(r.model.as_deref(), Some("tiny"));
        let mut f = form();
        f.temperature = Some("0".into());
        f.language = Some("auto".into());
        let r = validate(f).expect("valid");
        assert_eq!((r.temperature, r.language), (None, None));
    }
}
