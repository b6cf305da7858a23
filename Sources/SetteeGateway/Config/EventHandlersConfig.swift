import SetteeCore
import SetteeJSON

/// A database's `"event_handlers"` (Sync Gateway 1.x):
/// `{"max_processes": 500, "wait_for_process": "100", "document_changed": [{"handler": "webhook", "url": …,
/// "filter": "function(doc){…}", "timeout": 60}]}`.
public struct EventHandlersConfig: Sendable, Equatable {
    /// Events handled at once (Sync Gateway's goroutines). Events of one document are never handled at the same
    /// time: they go to one lane, in order.
    public var maxProcesses: Int
    /// Milliseconds a change waits for room when the event queue is full before its event is dropped (counted).
    public var waitForProcessMs: Int
    public var documentChanged: [Webhook]

    public struct Webhook: Sendable, Equatable {
        public var url: String
        /// A JavaScript `function(doc) { return true/false; }`; nil posts every change.
        public var filter: String?
        /// Seconds one POST may take (Sync Gateway's default 60; 0 means that default).
        public var timeoutSeconds: Int

        public init(url: String, filter: String? = nil, timeoutSeconds: Int = Self.defaultTimeoutSeconds) {
            self.url = url
            self.filter = filter
            self.timeoutSeconds = timeoutSeconds
        }

        public static let defaultTimeoutSeconds = 60
    }

    public static let defaultMaxProcesses = 500
    public static let defaultWaitForProcessMs = 100

    public init(
        maxProcesses: Int = Self.defaultMaxProcesses, waitForProcessMs: Int = Self.defaultWaitForProcessMs,
        documentChanged: [Webhook]
    ) {
        self.maxProcesses = maxProcesses
        self.waitForProcessMs = waitForProcessMs
        self.documentChanged = documentChanged
    }

    init(json: JSON, path: String) throws(ConfigError) {
        var o = try ConfigObject(json, path: path)
        maxProcesses = try o.int("max_processes", in: 1...Limits.webhookMaxProcesses) ?? Self.defaultMaxProcesses
        // Sync Gateway documents it as a string of milliseconds ("100"); a number is accepted too.
        if let (k, v) = o.value("wait_for_process") {
            let ms: Int?
            switch v {
            case .string(let s): ms = Int(s)
            case .integer(let i): ms = Int(exactly: i)
            default: ms = nil
            }
            guard let ms, (0...Limits.webhookMaxWaitForProcessMs).contains(ms) else {
                throw ConfigError(
                    path: o.child(k),
                    message: "must be milliseconds 0-\(Limits.webhookMaxWaitForProcessMs), like \"100\"")
            }
            waitForProcessMs = ms
        } else {
            waitForProcessMs = Self.defaultWaitForProcessMs
        }
        var hooks: [Webhook] = []
        if let (k, v) = o.value("document_changed") {
            guard case .array(let items) = v else { throw ConfigError(path: o.child(k), message: "must be an array") }
            guard items.count <= Limits.webhookMaxHandlers else {
                throw ConfigError(path: o.child(k), message: "at most \(Limits.webhookMaxHandlers) handlers")
            }
            for (i, item) in items.enumerated() {
                var h = try ConfigObject(item, path: "\(o.child(k))[\(i)]")
                guard let handler = try h.string("handler"), handler == "webhook" else {
                    throw ConfigError(path: h.child("handler"), message: "must be \"webhook\"")
                }
                guard let url = try h.string("url"), url.hasPrefix("http://") || url.hasPrefix("https://") else {
                    throw ConfigError(path: h.child("url"), message: "must be an http:// or https:// URL")
                }
                let filter = try h.string("filter")
                let timeout = try h.int("timeout", in: 0...Limits.webhookMaxTimeoutSeconds) ?? 0
                try h.finish()
                hooks.append(
                    Webhook(
                        url: url, filter: filter, timeoutSeconds: timeout == 0 ? Webhook.defaultTimeoutSeconds : timeout
                    ))
            }
        }
        documentChanged = hooks
        try o.finish()
    }
}
