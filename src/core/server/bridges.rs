//! The server as ensembles and backends see it: step runs and the backend API (BLS, model control)
//! through weak handles, so that the models never keep the server alive.

use super::handle::{Inner, Server};
use super::inference::is_decoupled;
use crate::core::scheduler::ensemble::StepRunner;
use crate::error::{Error, Result};
use crate::model_api::custom_metrics::CustomMetrics;
use crate::model_api::types::{InferRequest, InferResponse, StreamResponse};
use crate::model_api::{ExecResult, LoadOptions, ServerApi};
use futures_util::stream::BoxStream;
use std::sync::{Arc, Weak};

/// Runs ensemble steps through [`Server::infer`], so a composing model's validation, scheduler and
/// statistics apply to them as to any request.
pub(super) struct StepsThroughServer(pub(super) Weak<Inner>);

impl StepRunner for StepsThroughServer {
    fn run(&self, req: InferRequest) -> futures_util::future::BoxFuture<'static, Result<ExecResult>> {
        let inner = self.0.upgrade();
        Box::pin(async move {
            let inner = inner.ok_or_else(|| Error::unavailable("the server is shutting down"))?;
            let (response, timings) = Server { inner }.infer_timed(req, None).await?;
            Ok(ExecResult { outputs: response.outputs, timings, parameters: response.parameters })
        })
    }

    fn run_stream(
        &self,
        req: InferRequest,
    ) -> futures_util::future::BoxFuture<'static, Result<BoxStream<'static, Result<StreamResponse>>>> {
        let inner = self.0.upgrade();
        Box::pin(async move {
            let inner = inner.ok_or_else(|| Error::unavailable("the server is shutting down"))?;
            Server { inner }.infer_stream(req).await
        })
    }
}

/// What backends ask of the server (Python BLS, model control), through a weak handle.
pub(super) struct ApiThroughServer(pub(super) Weak<Inner>);

impl ApiThroughServer {
    fn server(&self) -> Result<Server> {
        self.0.upgrade().map(|inner| Server { inner }).ok_or_else(|| Error::unavailable("the server is shutting down"))
    }
}

impl ServerApi for ApiThroughServer {
    fn infer(&self, req: InferRequest) -> futures_util::future::BoxFuture<'static, Result<InferResponse>> {
        let server = self.server();
        Box::pin(async move { server?.infer(req).await })
    }

    fn infer_stream(
        &self,
        req: InferRequest,
    ) -> futures_util::future::BoxFuture<'static, Result<BoxStream<'static, Result<StreamResponse>>>> {
        let server = self.server();
        Box::pin(async move { server?.infer_stream(req).await })
    }

    fn load_model(&self, name: String, opts: LoadOptions) -> futures_util::future::BoxFuture<'static, Result<()>> {
        let server = self.server();
        Box::pin(async move { server?.load_model(&name, opts).await })
    }

    fn unload_model(&self, name: String) -> futures_util::future::BoxFuture<'static, Result<()>> {
        let server = self.server();
        Box::pin(async move { server?.unload_model(&name).await })
    }

    fn model_ready(&self, name: String, version: String) -> futures_util::future::BoxFuture<'static, Result<bool>> {
        let server = self.server();
        Box::pin(async move { server?.model_ready(&name, &version).await })
    }

    fn is_decoupled(&self, name: &str, version: Option<i64>) -> Result<bool> {
        let server = self.server()?;
        let model = server.inner.models.get(name, version)?;
        Ok(is_decoupled(&model.config))
    }

    fn custom_metrics(&self) -> Option<Arc<CustomMetrics>> {
        self.0.upgrade().map(|inner| inner.custom_metrics.clone())
    }
}
