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
        // A checkpoint from before a purged tombstone's deletion: refused, never answered without it (ADR 0145).
        try db.admitPull(since: options.query.since)
        switch options.feed {
        case .normal:
            var pager = ChangesPager(options.query)
            let first = try await pager.next(db, user: user)
            return normal(r, first: first, pager: pager)
        case .longpoll:
            var pager = ChangesPager(options.query)
            let first = try await pager.next(db, user: user)
            if !first.rows.isEmpty { return normal(r, first: first, pager: pager) }
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

    /// An answer whose first page is read: buffered when that page is the whole answer and has no `include_docs`
    /// bodies to read, else written a page at a time (`ChangesPager`), each page a chunk at a time.
    private static func normal(_ r: GatewayRequest, first: ChangesPage, pager: ChangesPager) -> GatewayReply {
        let db = r.database
        let user = r.user
        guard first.bodyReads.isEmpty, pager.done else {
            return .streamed(r, headers: headers(json: true)) { write in
                var rest = pager
                try await writeEnvelope(first: first, rest: &rest, db: db, user: user, write)
            }
        }
        var body: [UInt8] = []
        writeRows(first.rows, first: true, into: &body)
        return .buffered(
            status: 200, headers: headers(json: true),
            body: envelope(body, rows: !first.rows.isEmpty, lastSeq: first.lastSeq))
    }

    /// `{"results":[\r\n row,\n row\n],\n"last_seq":"N"}\n` (Sync Gateway's layout; `last_seq` a string): `first`, then
    /// the pages `rest` still reads, each written a chunk at a time with its `include_docs` bodies (`forEachChunk`).
    static func writeEnvelope(
        first: ChangesPage, rest: inout ChangesPager, db: GatewayDatabase, user: UserContext?,
        _ write: ([UInt8]) async throws -> Void
    ) async throws {
        try await write(Array(envelopeHead.utf8))
        var any = false
        _ = try await rest.forEachChunk(after: first, db, user: user) { rows in
            var out: [UInt8] = []
            writeRows(rows, first: !any, into: &out)
            any = any || !rows.isEmpty
            // An empty chunk would end a chunked body early.
            if !out.isEmpty { try await write(out) }
        }
        try await write(envelopeTail(rows: any, lastSeq: rest.lastSeq))
    }

    private static let envelopeHead = "{\"results\":[\r\n"

    /// Rows separated as the envelope wants them (`first`: no separator before the first of them).
    private static func writeRows(_ rows: some Collection<ChangeRow>, first: Bool, into out: inout [UInt8]) {
        var first = first
        for row in rows {
            if !first { out.append(contentsOf: ",\n".utf8) }
            first = false
            row.json.write(into: &out)
        }
    }

    private static func envelopeTail(rows: Bool, lastSeq: ChangesSince) -> [UInt8] {
        var out: [UInt8] = rows ? [UInt8(ascii: "\n")] : []
        out.append(contentsOf: "],\n\"last_seq\":".utf8)
        JSON.writeString(lastSeq.description, into: &out)
        out.append(contentsOf: "}\n".utf8)
        return out
    }

    /// The whole envelope around rows already written (`writeRows`).
    private static func envelope(_ rows: [UInt8], rows any: Bool, lastSeq: ChangesSince) -> [UInt8] {
        var out = Array(envelopeHead.utf8)
        out.append(contentsOf: rows)
        out.append(contentsOf: envelopeTail(rows: any, lastSeq: lastSeq))
        return out
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
        var pager = ChangesPager(finishedAt: q.since)
        while db.isOnline && !Task.isCancelled {
            let wake = nextWake(options, idleDeadline: idleDeadline)
            let changed = await db.waitForChange(after: q.since, user: user, channels: q.channels, deadline: wake)
            if changed {
                var next = ChangesPager(q)
                do { page = try await next.next(db, user: user) } catch { break }
                if !page.rows.isEmpty {
                    pager = next
                    break
                }
                pager = ChangesPager(finishedAt: page.lastSeq)
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
        try await writeEnvelope(first: page, rest: &pager, db: db, user: user) {
            try await writer.write(ByteBuffer(bytes: $0))
        }
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
            // What is there now, a page at a time (`ChangesPager`).
            // A page the database refuses (gone offline) ends the feed quietly; a write that fails (the client went
            // away) ends it with its error.
            var pager = ChangesPager(q)
            let wrote: Bool
            do {
                wrote = try await pager.forEachChunk(db, user: user) { rows in
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
            } catch is GatewayError {
                break feed
            }
            q.since = pager.lastSeq
            if wrote {
                if options.query.limit > 0 && sent >= options.query.limit { break feed }
                if options.query.limit > 0 { q.limit = options.query.limit - sent }
                idleDeadline = .now + .milliseconds(options.timeoutMs)
                continue
            }
            while true {
                let changed = await db.waitForChange(
                    after: q.since, user: user, channels: q.channels,
                    deadline: nextWake(options, idleDeadline: idleDeadline))
                if changed {
                    // A wake-up whose page turns out empty (filtered rows) must not spin.
                    var one = q
                    one.limit = 1
                    let probe = try? await db.changeRows(one, user: user)
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
