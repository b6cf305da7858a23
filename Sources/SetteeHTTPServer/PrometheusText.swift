/// The Prometheus text exposition format (version 0.0.4), as the node's `/metrics` and the gateway's `/_metrics`
/// serve it.
public enum PrometheusText {
    /// Its content type.
    public static let contentType = "text/plain; version=0.0.4; charset=utf-8"
}
