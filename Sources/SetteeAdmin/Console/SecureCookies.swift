import Foundation
import HTTPTypes
import Hummingbird

/// Cookies the admin API sets over HTTPS carry `Secure`, so a browser never sends the console's session token
/// over the plain port (or any plain-HTTP page of the same host). The console's session cookie is set by one
/// router that both admin ports share; the HTTPS application wraps that router in `SecureCookies`, and the
/// plain one does not (a `Secure` cookie set over plain HTTP would be dropped by the browser, breaking
/// log-in there).
public struct SecureCookies<Inner: HTTPResponderBuilder>: HTTPResponderBuilder {
    public struct Responder: HTTPResponder {
        let inner: Inner.Responder

        public func respond(to request: Request, context: Inner.Responder.Context) async throws -> Response {
            var response = try await inner.respond(to: request, context: context)
            response.headers = SecureCookie.marked(response.headers)
            return response
        }
    }

    let inner: Inner

    public init(_ inner: Inner) { self.inner = inner }

    public func buildResponder() -> Responder { Responder(inner: inner.buildResponder()) }
}

/// The pure part: `Set-Cookie` values with `; Secure` appended where it is missing.
enum SecureCookie {
    static func marked(_ value: String) -> String {
        let attributes = value.split(separator: ";").dropFirst()
        let secure = attributes.contains { $0.trimmingCharacters(in: .whitespaces).lowercased() == "secure" }
        return secure ? value : value + "; Secure"
    }

    static func marked(_ headers: HTTPFields) -> HTTPFields {
        guard headers.contains(.setCookie) else { return headers }
        var out = HTTPFields()
        for field in headers {
            out.append(field.name == .setCookie ? HTTPField(name: .setCookie, value: marked(field.value)) : field)
        }
        return out
    }
}
