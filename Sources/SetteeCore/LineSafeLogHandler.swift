import Logging

/// A `LogHandler` that keeps every entry on one line whatever a client sent: control characters and the Unicode line
/// and paragraph separators in the message, in every metadata value (the handler's own, its provider's and the
/// call's) and in the source are escaped as `\u{…}` (`LogText.lineSafe`) before `inner` writes the entry. It fixes
/// the whole kind of log forging at the one place every line passes, beside `LogText.userData`, which still marks
/// user data for redaction (issue 72: a DCP connection name with a newline wrote a forged line).
///
/// `inner`'s own metadata and metadata provider are left empty; this handler holds them, as swift-log's value
/// semantics ask (`metadata` changes affect this handler only).
public struct LineSafeLogHandler<Inner: LogHandler>: LogHandler {
    /// The handler that writes the escaped entry (for instance `StreamLogHandler.standardError(label:)`).
    public var inner: Inner
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?

    /// Wraps `inner`, taking over its metadata and provider.
    public init(_ inner: Inner) {
        var inner = inner
        self.metadata = inner.metadata
        self.metadataProvider = inner.metadataProvider
        inner.metadata = [:]
        inner.metadataProvider = nil
        self.inner = inner
    }

    public var logLevel: Logger.Level {
        get { inner.logLevel }
        set { inner.logLevel = newValue }
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { _, new in new } }
        if let own = event.metadata { merged.merge(own) { _, new in new } }
        var safe = event
        safe.message = Logger.Message(stringLiteral: LogText.lineSafe(event.message.description))
        safe.metadata = merged.isEmpty ? nil : merged.mapValues(Self.lineSafe)
        safe.source = LogText.lineSafe(event.source)
        inner.log(event: safe)
    }

    static func lineSafe(_ value: Logger.Metadata.Value) -> Logger.Metadata.Value {
        switch value {
        case .string(let s): .string(LogText.lineSafe(s))
        case .stringConvertible(let c): .string(LogText.lineSafe(c.description))
        case .dictionary(let d): .dictionary(d.mapValues(lineSafe))
        case .array(let a): .array(a.map(lineSafe))
        }
    }
}
