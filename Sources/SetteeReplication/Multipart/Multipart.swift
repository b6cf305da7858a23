import SetteeCore

/// Why a multipart body could not be read.
public struct MultipartError: Error, Sendable, Equatable, CustomStringConvertible {
    public var reason: String
    public init(_ reason: String) { self.reason = reason }
    public var description: String { "bad multipart body: \(reason)" }
}

/// One MIME part: its headers (in order, names as sent) and body bytes.
public struct MultipartPart: Sendable, Equatable {
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]

    public init(headers: [(name: String, value: String)] = [], body: [UInt8]) {
        self.headers = headers
        self.body = body
    }

    /// A part whose body is the nested multipart (its `Content-Type` names the nested boundary).
    public init(nested: Multipart, headers: [(name: String, value: String)] = []) {
        self.headers =
            [("Content-Type", nested.contentType)] + headers.filter { $0.name.lowercased() != "content-type" }
        self.body = nested.serialized()
    }

    /// A JSON part (`Content-Type: application/json`) with optional extra headers.
    public init(json: [UInt8], headers: [(name: String, value: String)] = []) {
        self.headers = [("Content-Type", "application/json")] + headers
        self.body = json
    }

    public static func == (a: MultipartPart, b: MultipartPart) -> Bool {
        a.body == b.body && a.headers.count == b.headers.count
            && zip(a.headers, b.headers).allSatisfy { $0.name == $1.name && $0.value == $1.value }
    }

    /// The first header called `name` (case-insensitive).
    public func header(_ name: String) -> String? {
        let lower = name.lowercased()
        return headers.first { $0.name.lowercased() == lower }?.value
    }

    public var contentType: MediaType? { header("Content-Type").flatMap(MediaType.init) }

    /// `filename` of `Content-Disposition` (how CouchDB names an attachment part).
    public var filename: String? { header("Content-Disposition").flatMap(MediaType.init)?["filename"] }

    public var contentEncoding: String? { header("Content-Encoding")?.trimmed.lowercased() }

    /// Sync Gateway's `X-Doc-ID` / `X-Rev-ID` part headers.
    public var docID: String? { header("X-Doc-ID") }
    public var revID: String? { header("X-Rev-ID") }

    /// Sync Gateway marks error parts `application/json; error="true"`.
    public var isError: Bool { contentType?["error"] == "true" }

    /// The body parsed as a multipart, when this part's content type is `multipart/*`.
    public func nested() throws(MultipartError) -> Multipart? {
        guard let type = contentType, type.isMultipart else { return nil }
        return try Multipart.parse(body, contentType: type)
    }
}

/// A multipart body (RFC 2046 §5.1): parts separated by `--boundary` lines, as CouchDB and Sync Gateway
/// send `multipart/related` documents (JSON first, attachments after) and `multipart/mixed` `_bulk_get` /
/// `open_revs` answers (one part per revision, itself `multipart/related` when it carries attachments).
///
/// Parsing is done by `MultipartParser` (incremental; this type's `parse` feeds it one buffer); writing
/// produces CRLF line ends, no preamble and no epilogue beyond the final CRLF.
public struct Multipart: Sendable, Equatable {
    /// `mixed`, `related`, `form-data`, ...
    public var subtype: String
    public var boundary: String
    public var parts: [MultipartPart]

    public init(subtype: String, boundary: String = Multipart.makeBoundary(), parts: [MultipartPart] = []) {
        precondition(Multipart.isValidBoundary(boundary), "invalid multipart boundary \(boundary)")
        self.subtype = subtype.lowercased()
        self.boundary = boundary
        self.parts = parts
    }

    /// `multipart/<subtype>; boundary="..."`, the header value naming this body.
    public var contentType: String {
        MediaType(type: "multipart", subtype: subtype, parameters: [("boundary", boundary)]).description
    }

    /// A random boundary (32 hex digits): never found in JSON bodies, and attachment bytes colliding with
    /// it have probability 2^-128 per position.
    public static func makeBoundary() -> String { RandomID.hex128() }

    /// RFC 2046's boundary alphabet, 1 to 70 characters, not ending in a space.
    public static func isValidBoundary(_ b: String) -> Bool {
        let allowed = Set("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ'()+_,-./:=? ".utf8)
        return (1...70).contains(b.utf8.count) && b.utf8.allSatisfy(allowed.contains) && b.utf8.last != 0x20
    }

    /// The `boundary` parameter of a `multipart/*` Content-Type header value.
    public static func boundary(fromContentType header: String) -> String? {
        guard let type = MediaType(header), type.isMultipart, let b = type["boundary"], !b.isEmpty else { return nil }
        return b
    }

    /// Parses a complete body whose `Content-Type` header value is `contentType`.
    public static func parse(_ body: [UInt8], contentType: String) throws(MultipartError) -> Multipart {
        guard let type = MediaType(contentType) else { throw MultipartError("no content type") }
        return try parse(body, contentType: type)
    }

    public static func parse(_ body: [UInt8], contentType type: MediaType) throws(MultipartError) -> Multipart {
        guard type.isMultipart else { throw MultipartError("content type \(type.essence) is not multipart") }
        guard let boundary = type["boundary"], !boundary.isEmpty else { throw MultipartError("no boundary") }
        return try parse(body, subtype: type.subtype, boundary: boundary)
    }

    public static func parse(_ body: [UInt8], subtype: String, boundary: String) throws(MultipartError) -> Multipart {
        var parser = try MultipartParser(boundary: boundary)
        var parts = try parser.feed(body)
        parts += try parser.finish()
        var m = Multipart(subtype: subtype, boundary: Multipart.isValidBoundary(boundary) ? boundary : "b")
        m.boundary = boundary
        m.parts = parts
        return m
    }

    /// The body bytes: `--b CRLF headers CRLF CRLF body CRLF` per part, then `--b-- CRLF`.
    public func serialized() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(parts.reduce(64) { $0 + $1.body.count + 128 })
        write(into: &out)
        return out
    }

    public func write(into out: inout [UInt8]) {
        let dashBoundary = Array("--\(boundary)".utf8)
        for part in parts {
            out.append(contentsOf: dashBoundary)
            out.append(contentsOf: crlf)
            for (name, value) in part.headers {
                out.append(contentsOf: name.utf8)
                out.append(contentsOf: ": ".utf8)
                out.append(contentsOf: value.utf8)
                out.append(contentsOf: crlf)
            }
            out.append(contentsOf: crlf)
            out.append(contentsOf: part.body)
            out.append(contentsOf: crlf)
        }
        out.append(contentsOf: dashBoundary)
        out.append(contentsOf: "--".utf8)
        out.append(contentsOf: crlf)
    }
}

private let crlf: [UInt8] = [0x0D, 0x0A]
