import HummingbirdCore
import NIOCore
import SetteeCore

extension HTTPServerBuilder {
    /// Settee's plain HTTP/1.1 server (the admin and views ports; inside `.tls(...)` their TLS ports): the idle
    /// timeout and header-size bound of `Limits`, and every request head due within `headDeadline`
    /// (`HeadDeadlineChildChannel`; never later than the idle timeout) and every request body at `bodyRate`. `closes`: where the port counts the
    /// connections it closes without answering (`settee_http_closed_without_response_total`).
    public static func settee(
        idleTimeout: TimeAmount, headDeadline: TimeAmount = .seconds(Limits.httpHeadDeadlineSeconds),
        closes: UnansweredCloseCounts? = nil, bodyRate: HeadDeadline.BodyRate = .standard
    ) -> HTTPServerBuilder {
        let configuration = HTTP1Channel.Configuration(
            idleTimeout: idleTimeout,
            httpDecoderConfiguration: .init(
                maxHeaderFieldSize: Limits.maxHTTPHeaderBytes, maxHeaderListSize: Limits.maxHTTPHeaderBytes))
        return HTTPServerBuilder { responder in
            HeadDeadlineChildChannel(
                inner: HTTP1Channel(responder: responder, configuration: configuration),
                headDeadline: HeadDeadline.effective(headDeadline, idleTimeout: idleTimeout), upgradable: false,
                closes: closes, idleTimeout: idleTimeout, bodyRate: bodyRate)
        }
    }
}

extension HeadDeadline {
    /// The head deadline in force: a head may not take longer than the idle timeout either (tests that shorten the
    /// idle timeout shorten both).
    public static func effective(_ headDeadline: TimeAmount, idleTimeout: TimeAmount) -> TimeAmount {
        min(headDeadline, idleTimeout)
    }
}
