import Histogram
import NIOCore
import NIOHTTP1

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

extension GatewayLoad {
    /// One fan-out round: `clients` connections each hold `_changes?feed=longpoll&since=<update_seq>` on the
    /// public port; once every response head has arrived (the feeds are waiting) one document is written
    /// (admin port when given); each feed's latency runs from the moment that write left the client to the
    /// moment its reply (carrying the document's row) arrived. Connection setup is not measured.
    public func fanout(prefix: String, round: Int) async -> GatewayPhaseResult {
        var t = WorkerTally()
        var clients: [HTTPConnection] = []
        var seconds = 0.0
        var early = 0
        var missed = 0
        do {
            raiseOpenFileLimit(to: options.clients + 1024)
            clients = try await connectMany(options.clients)
            let seq = try await updateSeq()
            let (writer, endpoint) = try await connectControl()
            let uri = target.publicURL.path(
                "/_changes?feed=longpoll&since=\(GatewayRequests.queryValue(seq))&timeout=\(options.waitMillis)")
            let headsSeen = Counter()
            let repliesSeen = Counter()
            var replies: [EventLoopFuture<HTTPReply>] = []
            for c in clients {
                let head = c.channel.eventLoop.makePromise(of: UInt64.self)
                head.futureResult.whenSuccess { _ in headsSeen.add(1) }
                let reply = c.send(.GET, uri, onHead: head)
                reply.whenComplete { _ in repliesSeen.add(1) }
                replies.append(reply)
            }
            // A waiting longpoll streams: its head is written just before the feed starts waiting.
            let settleBy = uptimeNanos() + UInt64(options.settleMillis) * 1_000_000
            while headsSeen.value + repliesSeen.value < clients.count
                && uptimeNanos() < settleBy
            {
                try await Task.sleep(for: .milliseconds(10))
            }
            try await Task.sleep(for: .milliseconds(100))
            if options.progress {
                printErr(
                    "[fanout \(target.label) round \(round)] \(headsSeen.value) of \(clients.count)"
                        + " feeds waiting; writing")
            }
            let docID = "\(prefix)-fanout"
            let body: [UInt8] = Array("{\"type\":\"fanout\",\"channels\":[\"bench\"],\"round\":\(round)}".utf8)
            let write = try await writer.request(.PUT, endpoint.path("/" + docID), body: ByteBuffer(bytes: body))
            t.record("write", write.endAt - write.sentAt)
            await writer.close()
            let sentAt = write.sentAt
            let giveUpAt = uptimeNanos() + UInt64(options.waitMillis + 10_000) * 1_000_000
            while repliesSeen.value < clients.count && uptimeNanos() < giveUpAt {
                try await Task.sleep(for: .milliseconds(10))
            }
            if repliesSeen.value < clients.count {
                for c in clients { await c.close() }
            }
            var lastArrival = sentAt
            for reply in replies {
                t.requests += 1
                guard let r = try? await reply.get() else {
                    missed += 1
                    t.error("changes: no reply")
                    continue
                }
                if r.status != 200 {
                    t.error("changes: HTTP \(r.status)")
                } else if r.endAt < sentAt {
                    early += 1
                } else if r.bodyString.contains(docID) {
                    _ = t.latency.record(max(r.endAt - sentAt, 1))
                    t.docs += 1
                    lastArrival = max(lastArrival, r.endAt)
                } else {
                    missed += 1
                }
            }
            seconds = Double(lastArrival - sentAt) / 1e9
        } catch {
            t.error("\(error)")
        }
        for c in clients { await c.close() }
        var result = GatewayPhaseResult(
            target: target.label, phase: .fanout, round: round, docs: t.docs, seconds: seconds, requests: t.requests,
            errors: t.errors, latency: t.latency, requestLatency: t.perRequest)
        result.clients = clients.count
        result.early = early
        result.missed = missed
        return result
    }

    /// Opens `n` public-port connections, at most 64 connects at a time.
    func connectMany(_ n: Int) async throws -> [HTTPConnection] {
        try await withThrowingTaskGroup(of: HTTPConnection.self) { group in
            var out: [HTTPConnection] = []
            var started = 0
            while started < min(n, 64) {
                group.addTask { try await connectPublic() }
                started += 1
            }
            while let c = try await group.next() {
                out.append(c)
                if started < n {
                    group.addTask { try await connectPublic() }
                    started += 1
                }
            }
            return out
        }
    }
}

/// Raises the soft RLIMIT_NOFILE to at least `wanted` (up to the hard limit); 1,000 feeds need more
/// descriptors than the usual 1,024 default once the generator's own are counted.
public func raiseOpenFileLimit(to wanted: Int) {
    var limit = rlimit()
    #if canImport(Glibc)
        let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
    #else
        let resource = RLIMIT_NOFILE
    #endif
    guard getrlimit(resource, &limit) == 0, limit.rlim_cur < rlim_t(wanted) else { return }
    limit.rlim_cur = min(rlim_t(wanted), limit.rlim_max)
    _ = setrlimit(resource, &limit)
}
