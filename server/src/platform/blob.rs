//! The blob store: uploaded files and parsed text, on the local disk by
//! default or any S3-compatible store by URL (`object_store`).

use std::sync::Arc;

use anyhow::Context;
use bytes::Bytes;
use object_store::{local::LocalFileSystem, path::Path, ObjectStore, PutPayload, WriteMultipart};

use crate::platform::config::Config;

/// Blob keys are built here so every module names objects the same way.
pub fn original_key(document_id: uuid::Uuid) -> String {
    format!("documents/{document_id}/original")
}

pub fn text_key(document_id: uuid::Uuid) -> String {
    format!("documents/{document_id}/text.txt")
}

#[derive(Clone)]
pub struct BlobStore {
    store: Arc<dyn ObjectStore>,
}

impl BlobStore {
    pub fn from_config(config: &Config) -> anyhow::Result<Self> {
        let store: Arc<dyn ObjectStore> = match &config.blob_url {
            Some(url) => {
                let url = url::Url::parse(url).context("parsing DOCFLOW_BLOB_URL")?;
                // Credentials and endpoint come from the usual AWS_* variables.
                let opts: Vec<(String, String)> = std::env::vars()
                    .filter(|(k, _)| k.starts_with("AWS_"))
                    .collect();
                let (store, prefix) =
                    object_store::parse_url_opts(&url, opts).context("opening the blob store")?;
                Arc::new(object_store::prefix::PrefixStore::new(store, prefix))
            }
            None => {
                let dir = config.data_dir.join("blobs");
                std::fs::create_dir_all(&dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
                Arc::new(LocalFileSystem::new_with_prefix(&dir).context("opening the blob folder")?)
            }
        };
        Ok(Self { store })
    }

    /// Starts a streaming write; finish it with [`BlobWriter::finish`] or drop/abort it.
    pub async fn writer(&self, key: &str) -> anyhow::Result<BlobWriter> {
        let upload = self
            .store
            .put_multipart(&Path::from(key))
            .await
            .context("starting a blob upload")?;
        Ok(BlobWriter {
            inner: Some(WriteMultipart::new_with_chunk_size(upload, 5 * 1024 * 1024)),
        })
    }

    pub async fn put(&self, key: &str, bytes: Bytes) -> anyhow::Result<()> {
        self.store
            .put(&Path::from(key), PutPayload::from(bytes))
            .await
            .context("writing a blob")?;
        Ok(())
    }

    pub async fn get(&self, key: &str) -> anyhow::Result<Bytes> {
        let r = self
            .store
            .get(&Path::from(key))
            .await
            .with_context(|| format!("reading blob {key}"))?;
        r.bytes()
            .await
            .with_context(|| format!("reading blob {key}"))
    }

    /// Deletes a blob; a missing one is not an error.
    pub async fn delete(&self, key: &str) -> anyhow::Result<()> {
        match self.store.delete(&Path::from(key)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e).with_context(|| format!("deleting blob {key}")),
        }
    }

    pub async fn exists(&self, key: &str) -> anyhow::Result<bool> {
        match self.store.head(&Path::from(key)).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(e).with_context(|| format!("looking up blob {key}")),
        }
    }
}

/// A streaming blob write. Nothing is visible under the key until `finish`.
pub struct BlobWriter {
    inner: Option<WriteMultipart>,
}

impl BlobWriter {
    pub async fn write(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        let w = self
            .inner
            .as_mut()
            .context("blob writer already finished")?;
        w.wait_for_capacity(4)
            .await
            .context("writing a blob part")?;
        w.write(bytes);
        Ok(())
    }

    pub async fn finish(mut self) -> anyhow::Result<()> {
        let w = self.inner.take().context("blob writer already finished")?;
        w.finish().await.context("completing a blob upload")?;
        Ok(())
    }

    /// Discards what was written; nothing is left behind.
    pub async fn abort(mut self) {
        if let Some(w) = self.inner.take() {
            if let Err(e) = w.abort().await {
                tracing::warn!(error = %e, "aborting a blob upload");
            }
        }
    }
}
