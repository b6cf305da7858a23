/// Whether a browser sent a request from another site, decided from its headers only (pure).
///
/// A page on another site can make a browser send a simple request (a form `POST` with a simple content
/// type) to our ports, and the browser attaches cached Basic credentials and cookies to it. Such a request
/// always carries an `Origin` header (and, in current browsers, `Sec-Fetch-Site`). Clients that are not
/// browsers (the `settee` CLI, SDKs, curl, peers) send neither, so they are never refused by this check.
public enum CrossOrigin {
    /// Whether the request comes from a page of another origin than `host` (the request's `Host` header).
    /// No `Origin` and no `Sec-Fetch-Site`: not a browser, or a same-origin navigation: not foreign.
    public static func isForeign(origin: String?, host: String?, secFetchSite: String?) -> Bool {
        if let site = secFetchSite?.lowercased() {
            if site == "cross-site" { return true }
            if site == "same-origin" || site == "none" { return false }
        }
        guard let origin else { return false }
        guard let originHost = authority(ofOrigin: origin), let host else { return true }
        let scheme = scheme(ofOrigin: origin)
        return normalised(originHost, scheme: scheme) != normalised(host, scheme: scheme)
    }

    /// Whether a request's content type is one a cross-site form may send without a CORS preflight
    /// (absent, `application/x-www-form-urlencoded`, `multipart/form-data`, `text/plain`). A request with
    /// any other content type was allowed by a preflight, so its origin passed the CORS policy.
    public static func isSimpleContentType(_ contentType: String?) -> Bool {
        guard let contentType else { return true }
        let media = contentType.split(separator: ";").first.map { String($0) } ?? ""
        let trimmed = media.filter { $0 != " " && $0 != "\t" }.lowercased()
        return trimmed.isEmpty || trimmed == "application/x-www-form-urlencoded" || trimmed == "multipart/form-data"
            || trimmed == "text/plain"
    }

    /// Whether a `Host` header names this machine's loopback (`localhost`, `127.x.x.x`, `[::1]`, any port). A page
    /// whose domain an attacker re-points at 127.0.0.1 (DNS rebinding) sends its own domain: a port that answers
    /// only on loopback and checks no password refuses it.
    public static func namesLoopback(host: String) -> Bool {
        var name = host.lowercased()
        if name.hasPrefix("[") {
            guard let close = name.firstIndex(of: "]") else { return false }
            name = String(name[name.index(after: name.startIndex)..<close])
            return name == "::1"
        }
        if let colon = name.firstIndex(of: ":") { name = String(name[..<colon]) }
        if name == "localhost" || name == "localhost." { return true }
        let parts = name.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "127"
            && parts.allSatisfy { p in
                p.count <= 3 && p.utf8.allSatisfy { $0 >= 0x30 && $0 <= 0x39 } && (Int(p).map { $0 <= 255 } ?? false)
            }
    }

    /// `host[:port]` of `scheme://host[:port]`; nil for `null` or anything else that is not an origin.
    static func authority(ofOrigin origin: String) -> String? {
        guard let range = origin.firstRange(of: "://") else { return nil }
        let rest = origin[range.upperBound...]
        guard !rest.isEmpty, !rest.contains("/") else { return nil }
        return String(rest)
    }

    static func scheme(ofOrigin origin: String) -> String {
        guard let range = origin.firstRange(of: "://") else { return "" }
        return origin[..<range.lowerBound].lowercased()
    }

    /// Lowercased `host:port`, the scheme's default port made explicit.
    static func normalised(_ authority: String, scheme: String) -> String {
        let lower = authority.lowercased()
        let hasPort: Bool
        if lower.hasPrefix("[") {
            hasPort = lower.contains("]:")
        } else {
            hasPort = lower.contains(":")
        }
        if hasPort { return lower }
        return lower + (scheme == "https" ? ":443" : ":80")
    }
}
