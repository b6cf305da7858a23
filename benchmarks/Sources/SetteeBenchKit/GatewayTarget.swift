/// One database of a Sync Gateway-compatible server: `http://HOST:PORT/DB` (loopback only).
public struct GatewayEndpoint: Sendable, Hashable, Codable, CustomStringConvertible {
    public var host: String
    public var port: Int
    public var db: String

    public var description: String { "http://\(host):\(port)/\(db)" }

    /// `/db` + `rest` (rest starts with `/`).
    public func path(_ rest: String = "/") -> String { "/" + db + rest }

    public struct ParseError: Error, CustomStringConvertible {
        public var text: String
        public var reason: String
        public var description: String { "'\(text)': \(reason)" }
    }

    /// Parses `http://HOST:PORT/DB`.
    public static func parse(_ text: String) throws(ParseError) -> GatewayEndpoint {
        guard text.hasPrefix("http://") else { throw ParseError(text: text, reason: "must start with http://") }
        let rest = text.dropFirst("http://".count)
        guard let slash = rest.firstIndex(of: "/") else {
            throw ParseError(text: text, reason: "needs a database path (http://HOST:PORT/DB)")
        }
        let authority = rest[..<slash]
        let db = rest[rest.index(after: slash)...].split(separator: "/").first.map(String.init) ?? ""
        guard !db.isEmpty else { throw ParseError(text: text, reason: "needs a database path (http://HOST:PORT/DB)") }
        guard let colon = authority.lastIndex(of: ":"), let port = Int(authority[authority.index(after: colon)...]),
            (1...65535).contains(port)
        else { throw ParseError(text: text, reason: "needs HOST:PORT") }
        var host = String(authority[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard BenchTarget.isLoopback(host) else {
            throw ParseError(text: text, reason: "'\(host)' is not a loopback address")
        }
        return GatewayEndpoint(host: host, port: port, db: db)
    }
}

/// A gateway under test: its public endpoint (what replicators and feeds use), optionally its admin
/// endpoint (for `update_seq` and the fan-out write), and a label for the tables.
public struct GatewayTarget: Sendable, Codable {
    public var label: String
    public var publicURL: GatewayEndpoint
    public var adminURL: GatewayEndpoint?

    public init(label: String, publicURL: GatewayEndpoint, adminURL: GatewayEndpoint?) {
        self.label = label
        self.publicURL = publicURL
        self.adminURL = adminURL
    }

    /// Parses `[NAME@]http://HOST:PORT/DB` for the public endpoint.
    public static func parse(_ text: String, admin: String?) throws(GatewayEndpoint.ParseError) -> GatewayTarget {
        var label: String? = nil
        var url = Substring(text)
        if let at = url.firstIndex(of: "@"), let scheme = url.firstRange(of: "://"), at < scheme.lowerBound {
            label = String(url[..<at])
            url = url[url.index(after: at)...]
        }
        let publicURL = try GatewayEndpoint.parse(String(url))
        let adminURL = try admin.map { (a: String) throws(GatewayEndpoint.ParseError) in try GatewayEndpoint.parse(a) }
        return GatewayTarget(
            label: label ?? "gateway@\(publicURL.port)", publicURL: publicURL, adminURL: adminURL)
    }
}
