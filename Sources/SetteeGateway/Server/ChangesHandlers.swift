import HTTPTypes
import Hummingbird
import HummingbirdCore
import NIOCore
import SetteeCore
import SetteeJSON

/// `_changes`: normal, longpoll and continuous feeds over `GatewayDatabase.changes` and
/// `waitForChange` (woken by writes and access changes, never polling). Waiting feeds stream: heartbeat
/// newlines and continuous rows are written as they happen, nothing is buffered whole.
enum ChangesHandlers {
    static let cacheControl = "private, max-age=0, no-cache, no-store"

    static func changes(_ r: GatewayRequest) async throws -> GatewayReply {
        let body: JSON? = r.method == "POST" && !r.body.isEmpty ? try r.bodyJSON() : nil
        let options = try ChangesOptions.parse(ChangesOptions.merge(query: r.query, body: body))
        let db = r.database
        let user = r.user
        switch options.feed {
        case .normal:
            return try await normal(r, page: db.changeRows(options.query, user: user))
        case .longpoll:
            let page = try await db.changeRows(options.query, user: user)
            if !page.rows.isEmpty { return try await normal(r, page: page) }
            let response = Response(
                status: .ok, headers: headers(json: true),
                body: ResponseBody { writer in
                    try await longpoll(db: db, user: user, options: options, writer: &writer)
                })
            return .stream(response)
        case .continuous:
            let response = Response(
                status: .ok, headers: headers(json: false),
                body: ResponseBody { writer in
                    try await continuous(db: db, user: user, options: options, writer: &writer)
                })
            return .stream(response)
        case .websocket:
            throw GatewayError.badRequest("feed=websocket needs a websocket upgrade (GET with Upgrade: websocket)")
        }
    }

    static func headers(json: Bool) -> HTTPFields {
        var h = HTTPFields()
        h[.contentType] = json ? GatewayReply.jsonType : "application/octet-stream"
        h[.cacheControl] = cacheControl
        return h
    }

    /// A page answered at once: buffered, or with `include_docs` bodies to read written a chunk at a time.
    private static func normal(_ r: GatewayRequest, page: ChangesPage) async throws -> GatewayReply {
        let db = r.database
        guard page.bodyReads.isEmpty else {
            return .streamed(r, headers: headers(json: true)) { write in
                try await writeEnvelope(page, db: db, write)
            }
        }
        var body: [UInt8] = []
        await writeEnvelope(page, db: db) { body.append(contentsOf: $0) }
        return .buffered(status: 200, headers: headers(json: true), body: body)
    }

    /// `{"results":[\r\n row,\n row\n],\n"last_seq":"N"}\n` (Sync Gateway's layout; `last_seq` a string), the rows
    /// written a chunk at a time with their `include_docs` bodies (`forEachChunk`).
    static func writeEnvelope(
        _ page: ChangesPage, db: GatewayDatabase, _ write: ([UInt8]) async throws -> Void
    ) async rethrows {
        try await write(Array("{\"results\":[\r\n".utf8))
        var first = true
        try await db.forEachChunk(of: page) { rows in
            var out: [UInt8] = []
            for row in rows {
                if !first { out.append(contentsOf: ",\n".utf8) }
                first = false
                row.json.write(into: &out)
            }
            try await write(out)
        }
        var out: [UInt8] = page.rows.isEmpty ? [] : [UInt8(ascii: "\n")]
        out.append(contentsOf: "],\n\"last_seq\":".utf8)
        JSON.writeString(page.lastSeq.description, into: &out)
        out.append(contentsOf: "}\n".utf8)
        try await write(out)
    }

    /// When the next wait should end: the next heartbeat, or the timeout (no heartbeat).
    private static func nextWake(
        _ options: ChangesOptions, idleDeadline: ContinuousClock.Instant
    ) -> ContinuousClock.Instant {
        if let hb = options.heartbeatMs { return .now + .milliseconds(hb) }
        return idleDeadline
    }

    /// Waits for a change the user may see; heartbeats (`"\n"`) while waiting; then the page, or an empty
    /// one with `last_seq` = `since` at the timeout or when the database goes offline.
    static func longpoll(
        db: GatewayDatabase, user: UserContext?, options: ChangesOptions, writer: inout any ResponseBodyWriter
    ) async throws {
        var q = options.query
        let idleDeadline = ContinuousClock.now + .milliseconds(options.timeoutMs)
        var page = ChangesPage(rows: [], lastSeq: q.since)
        while db.isOnline && !Task.isCancelled {
            let wake = nextWake(options, idleDeadline: idleDeadline)
            let changed = await db.waitForChange(after: q.since, user: user, channels: q.channels, deadline: wake)
            if changed {
                do { page = try await db.changeRows(q, user: user) } catch { break }
                if !page.rows.isEmpty { break }
                // Only filtered-out changes: wait past them (pause if the feed did not move, so a wake-up
                // that yields nothing cannot spin).
                if page.lastSeq == q.since { try? await Task.sleep(for: .milliseconds(100)) }
                q.since = page.lastSeq
                continue
            }
            if options.heartbeatMs != nil {
                try await writer.write(ByteBuffer(string: "\n"))
            } else if ContinuousClock.now >= idleDeadline {
                break
            }
        }
        try await writeEnvelope(page, db: db) { try await writer.write(ByteBuffer(bytes: $0)) }
        try await writer.finish(nil)
    }

    /// One row per line as changes arrive; heartbeats while idle; ends after `limit` rows, at the timeout
    /// (no heartbeat), when the database goes offline or when the client goes away (a write fails).
    static func continuous(
        db: GatewayDatabase, user: UserContext?, options: ChangesOptions, writer: inout any ResponseBodyWriter
    ) async throws {
        var q = options.query
        var sent = 0
        var idleDeadline = ContinuousClock.now + .milliseconds(options.timeoutMs)
        feed: while db.isOnline && !Task.isCancelled {
            let page: ChangesPage
            do { page = try await db.changeRows(q, user: user) } catch { break }
            if !page.rows.isEmpty {
                try await db.forEachChunk(of: page) { rows in
                    var out: [UInt8] = []
                    for row in rows {
                        if options.query.limit > 0 && sent >= options.query.limit { break }
                        row.json.write(into: &out)
                        out.append(UInt8(ascii: "\n"))
                        sent += 1
                    }
                    // An empty chunk would end a chunked body early.
                    if !out.isEmpty { try await writer.write(ByteBuffer(bytes: out)) }
                }
                if options.query.limit > 0 && sent >= options.query.limit { break feed }
                q.since = page.lastSeq
                if options.query.limit > 0 { q.limit = options.query.limit - sent }
                idleDeadline = .now + .milliseconds(options.timeoutMs)
                continue
            }
            q.since = page.lastSeq
            while true {
                let changed = await db.waitForChange(
                    after: q.since, user: user, channels: q.channels,
                    deadline: nextWake(options, idleDeadline: idleDeadline))
                if changed {
                    // A wake-up whose page turns out empty (filtered rows) must not spin.
                    let probe = try? await db.changeRows(q, user: user)
                    if let probe, probe.rows.isEmpty {
                        if probe.lastSeq == q.since { try? await Task.sleep(for: .milliseconds(100)) }
                        q.since = probe.lastSeq
                        continue
                    }
                }
                if changed || !db.isOnline || Task.isCancelled { continue feed }
                if options.heartbeatMs != nil {
                    try await writer.write(ByteBuffer(string: "\n"))
                } else if ContinuousClock.now >= idleDeadline {
                    break feed
                }
            }
        }
        try await writer.finish(nil)
    }
}
