import NIOCore
import NIOPosix
import SetteeClusterMap
import SetteeCore
import SetteeProtocol
import SetteeStorage
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

extension KVConnectionHandler {
    /// STAT: one response per statistic, closed by a response with an empty key. Groups:
    /// "" (general + engine), "vbucket-seqno [vb]", "vbucket", "collections", "scopes", "collections-details [vb]"
    /// (`collectionStats`). Only for a connection that authenticated or uses an
    /// open bucket (`mayReadNodeInformation`; kv_engine needs the SimpleStats privilege): the general group tells
    /// the process id, connection counts and login counters.
    func stat(_ frame: Frame) {
        guard mayReadNodeInformation() else { return refuseStranger(frame) }
        let group = String(buffer: frame.key)
        var pairs: [(String, String)] = []
        let engine: BucketEngine?
        if case .ok(let bucket) = currentBucket() { engine = bucket.engine } else { engine = nil }

        if group.isEmpty {
            let now = node.clock.nowNanoseconds()
            pairs.append(("pid", String(getpid())))
            pairs.append(("uptime", String((now &- node.counters.startedAt) / 1_000_000_000)))
            pairs.append(("time", String(now / 1_000_000_000)))
            pairs.append(("version", KVNode.version))
            pairs.append(("curr_connections", String(node.counters.currentConnections.load(ordering: .relaxed))))
            pairs.append(("total_connections", String(node.counters.totalConnections.load(ordering: .relaxed))))
            pairs.append(("rejected_conns", String(node.counters.rejectedConnections.load(ordering: .relaxed))))
            pairs.append(("cmd_get", String(node.counters.gets)))
            pairs.append(("cmd_set", String(node.counters.sets)))
            pairs.append(("get_hits", String(node.counters.getHits)))
            pairs.append(("get_misses", String(node.counters.getMisses)))
            pairs.append(("auth_errors", String(node.counters.authErrors.load(ordering: .relaxed))))
            pairs += node.counters.loginStats
            pairs.append(("protocol_errors", String(node.counters.protocolErrors.load(ordering: .relaxed))))
            // Requests for a vBucket active here refused with NOT_MY_VBUCKET for lack of a serving lease (ADR 0124).
            pairs.append(("lease_refusals", String(node.counters.leaseRefusals.load(ordering: .relaxed))))
            if let engine {
                let s = engine.stats()
                pairs.append(("curr_items", String(s.currItems)))
                pairs.append(("mem_used", String(s.memUsed)))
                pairs.append(("ep_max_size", String(s.memQuota)))
                pairs.append(("ep_queue_size", String(s.queueSize)))
                pairs.append(("ep_flusher_todo", String(s.flusherTodo)))
                pairs.append(("vb_active_num", String(s.vbActiveNum)))
                pairs.append(("ep_num_non_resident", String(s.nonResidentItems)))
                pairs.append(("ep_total_persisted", String(s.totalPersisted)))
                pairs.append(("ep_commit_num", String(s.flusherCommits)))
                pairs.append(("ep_bg_fetched", String(s.bgFetched)))
                pairs.append(("ep_num_value_ejects", String(s.evictions)))
                pairs.append(("ep_expired_pager", String(s.expired)))
                pairs.append(("ep_db_data_size", String(s.diskUsed)))
                pairs.append(("ep_warmup_value_count", String(s.warmupItems)))
                pairs.append(("ep_warmup_time", String(Int(s.warmupSeconds * 1_000_000))))
                pairs.append(("ep_disk_failure", s.diskFailure == nil ? "false" : "true"))
                pairs.append(("vb_active_sync_write_accepted_count", String(s.syncWrites.accepted)))
                pairs.append(("vb_active_sync_write_committed_count", String(s.syncWrites.committed)))
                pairs.append(("vb_active_sync_write_aborted_count", String(s.syncWrites.aborted)))
                pairs.append(("vb_replica_sync_write_accepted_count", String(s.syncWrites.replicaAccepted)))
                // Items of dropped collections the background purge has not removed yet (ADR 0138).
                pairs.append(("ep_collections_items_to_purge", String(s.collectionItemsToPurge)))
            }
        } else if group == "collections" || group == "scopes" || group.hasPrefix("collections-details") {
            guard let engine, case .ok(let bucket) = currentBucket() else {
                emit { $0.writeResponseHeader(opcode: .stat, status: .noBucket, opaque: frame.opaque) }
                return
            }
            collectionStatsOffLoop(frame, group: group, engine: engine, bucket: bucket)
            return
        } else if group.hasPrefix("vbucket-seqno") || group == "vbucket" {
            guard let engine, case .ok(let bucket) = currentBucket() else {
                emit { $0.writeResponseHeader(opcode: .stat, status: .noBucket, opaque: frame.opaque) }
                return
            }
            let settings = bucket.settings
            var vbs = Array(0..<settings.numVBuckets)
            let parts = group.split(separator: " ")
            if parts.count == 2 {
                guard let one = Int(parts[1]), one >= 0, one < settings.numVBuckets else {
                    emit { $0.writeResponseHeader(opcode: .stat, status: .notMyVBucket, opaque: frame.opaque) }
                    return
                }
                vbs = [one]
            }
            for v in vbs {
                let info = engine.seqnoInfo(VBucketID(UInt16(v)))
                if group == "vbucket" {
                    pairs.append(("vb_\(v)", info.state.rawValue))
                } else {
                    pairs.append(("vb_\(v):high_seqno", String(info.highSeqno.rawValue)))
                    pairs.append(("vb_\(v):abs_high_seqno", String(info.highSeqno.rawValue)))
                    pairs.append(("vb_\(v):last_persisted_seqno", String(info.persistedSeqno.rawValue)))
                    pairs.append(("vb_\(v):uuid", String(info.uuid.rawValue)))
                    pairs.append(("vb_\(v):purge_seqno", String(engine.purgeSeqno(VBucketID(UInt16(v))).rawValue)))
                }
            }
        } else {
            emit {
                $0.writeResponse(
                    opcode: .stat, status: .keyNotFound, opaque: frame.opaque, value: Array("Unknown stat group".utf8))
            }
            return
        }
        emit { Self.writeStats(pairs, opaque: frame.opaque, into: &$0) }
    }

    /// One STAT response per pair, then the closing one with an empty key.
    static func writeStats(_ pairs: [(String, String)], opaque: UInt32, into b: inout ByteBuffer) {
        for (k, v) in pairs {
            let kb = Array(k.utf8)
            let vb = Array(v.utf8)
            b.writeResponseHeader(
                opcode: .stat, status: .success, opaque: opaque, keyLength: kb.count, valueLength: vb.count)
            b.writeBytes(kb)
            b.writeBytes(vb)
        }
        b.writeResponseHeader(opcode: .stat, status: .success, opaque: opaque)
    }

    /// STATS `collections`, `scopes`, `collections-details [vb]`: their count is a pass over every active item, so it
    /// runs on the node's blocking pool and is answered in order (ADR 0143). At most
    /// `Limits.collectionStatsPassesPerNode` run at once on a node; one more is refused ETMPFAIL (the client may ask
    /// again), so pipelined STATS cannot fill the pool that logins and flushes share.
    private func collectionStatsOffLoop(_ frame: Frame, group: String, engine: BucketEngine, bucket: ResolvedBucket) {
        let node = self.node
        guard let loop = context?.eventLoop else { return }  // the connection is gone: nobody to answer
        guard
            node.collectionStatsPasses.wrappingAdd(1, ordering: .acquiringAndReleasing).newValue
                <= Limits.collectionStatsPassesPerNode
        else {
            node.collectionStatsPasses.wrappingSubtract(1, ordering: .relaxed)
            emit { $0.writeResponseHeader(opcode: .stat, status: .temporaryFailure, opaque: frame.opaque) }
            return
        }
        let slot = reserveSlot()
        let handler = NIOLoopBound(self, eventLoop: loop)
        let opaque = frame.opaque
        node.blockingPool.submit { _ in
            let counted = Self.collectionStats(group, engine: engine, bucket: bucket)
            node.collectionStatsPasses.wrappingSubtract(1, ordering: .relaxed)
            var b = ByteBuffer()
            if let counted {
                Self.writeStats(counted, opaque: opaque, into: &b)
            } else {
                b.writeResponseHeader(opcode: .stat, status: .notMyVBucket, opaque: opaque)
            }
            let answer = b
            loop.execute { handler.value.complete(slot, answer) }
        }
    }

    /// STATS `collections`, `scopes` and `collections-details [vb]` (ADR 0138), in cbstats' shape: keys
    /// `0x<scope id>:0x<collection id>:<stat>` (`name`, `scope_name`, `items`, `maxTTL`) for `collections`,
    /// `0x<scope id>:<stat>` (`name`, `collections`, `items`) and `0x<scope id>:0x<collection id>:name` for `scopes`,
    /// `vb_<n>:0x<scope id>:0x<collection id>:items` per active vBucket for `collections-details`, and
    /// `manifest_uid` (decimal) in each. Items are live items in this node's active vBuckets, counted on demand
    /// (`BucketEngine.collectionItemCounts`); dropped collections are not listed. Nil for a vBucket argument out of
    /// range. Blocking (a pass over the vBuckets' tables): off the event loop.
    static func collectionStats(_ group: String, engine: BucketEngine, bucket: ResolvedBucket) -> [(String, String)]? {
        let manifest = bucket.manifest
        let parts = group.split(separator: " ")
        var vbs = Array(0..<bucket.settings.numVBuckets)
        if parts.count == 2 {
            guard parts[0] == "collections-details", let one = Int(parts[1]), one >= 0,
                one < bucket.settings.numVBuckets
            else { return nil }
            vbs = [one]
        }
        var totals: [UInt32: Int] = [:]
        var perVB: [(Int, [UInt32: Int])] = []
        for v in vbs {
            guard let counts = engine.collectionItemCounts(VBucketID(UInt16(v))) else { continue }
            for (id, n) in counts { totals[id, default: 0] += n }
            perVB.append((v, counts))
        }
        var pairs: [(String, String)] = [("manifest_uid", String(manifest.uid))]
        for scope in manifest.scopes {
            let sid = "0x" + String(scope.id, radix: 16)
            if group == "scopes" {
                pairs.append(("\(sid):name", scope.name))
                pairs.append(("\(sid):collections", String(scope.collections.count)))
                pairs.append(("\(sid):items", String(scope.collections.reduce(0) { $0 + totals[$1.id, default: 0] })))
            }
            for c in scope.collections {
                let prefix = "\(sid):0x\(String(c.id, radix: 16))"
                switch parts.first {
                case "collections":
                    pairs.append(("\(prefix):name", c.name))
                    pairs.append(("\(prefix):scope_name", scope.name))
                    pairs.append(("\(prefix):items", String(totals[c.id, default: 0])))
                    pairs.append(("\(prefix):maxTTL", String(c.maxTTL)))
                case "scopes":
                    pairs.append(("\(prefix):name", c.name))
                default:
                    for (v, counts) in perVB {
                        pairs.append(("vb_\(v):\(prefix):items", String(counts[c.id, default: 0])))
                    }
                }
            }
        }
        return pairs
    }
}
