import Prometheus

extension GatewayServer {
    /// `GET /_metrics` (admin port, as Sync Gateway 2.8+ serves it), Prometheus text:
    ///
    ///     settee_gateway_password_checks_total   password (bcrypt) checks the public port ran since start
    ///                                            (`LoginGuard.passwordChecks`; throttled logins run none)
    ///
    /// The node's `/metrics` shows its own checks as `settee_password_checks_total`; the `_gateway` infix keeps the
    /// two apart when one Prometheus scrapes both. A fresh registry per scrape: the counter is the guard's running
    /// total, so there is no state to carry between scrapes.
    func prometheusText() -> [UInt8] {
        let registry = PrometheusCollectorRegistry()
        registry.makeCounter(
            descriptor: MetricNameDescriptor(
                metricName: "settee_gateway_password_checks_total", unitName: "",
                helpText: "Password checks the gateway's public port ran since start")
        ).increment(by: Int64(passwordChecks))
        return registry.emitToBuffer()
    }
}
