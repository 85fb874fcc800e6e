//! The operator's Kubernetes client, which counts every request it sends
//! (`neverwiped_api_requests_total`, by verb): what the operator costs the API server, measured.

use kube::client::{Body, ClientBuilder};
use kube::{Client, Config};
use tower::util::MapRequestLayer;

use crate::metrics::{ApiRequestLabels, Metrics};

/// A client from the kubeconfig or the in-cluster service account, counting its requests.
pub async fn counting_client(metrics: &Metrics) -> Result<Client, kube::Error> {
    let config = Config::infer().await.map_err(kube::Error::InferConfig)?;
    let requests = metrics.api_requests.clone();
    let count = MapRequestLayer::new(move |request: hyper::Request<Body>| {
        let labels = ApiRequestLabels {
            verb: verb(request.method(), request.uri().query()).into(),
        };
        requests.get_or_create(&labels).inc();
        request
    });
    Ok(ClientBuilder::try_from(config)?.with_layer(&count).build())
}

/// The request's verb as the API server names it (a GET with `watch=true` is a watch).
fn verb(method: &hyper::Method, query: Option<&str>) -> &'static str {
    let watching = query.is_some_and(|q| {
        q.split('&')
            .any(|pair| pair == "watch=true" || pair == "watch=1")
    });
    match *method {
        hyper::Method::GET if watching => "WATCH",
        hyper::Method::GET => "GET",
        hyper::Method::POST => "POST",
        hyper::Method::PUT => "PUT",
        hyper::Method::PATCH => "PATCH",
        hyper::Method::DELETE => "DELETE",
        _ => "OTHER",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watches_are_told_from_gets() {
        assert_eq!(
            verb(&hyper::Method::GET, Some("labelSelector=a&watch=true")),
            "WATCH"
        );
        assert_eq!(verb(&hyper::Method::GET, Some("limit=500")), "GET");
        assert_eq!(verb(&hyper::Method::PATCH, None), "PATCH");
    }
}
