import NIOCore
import SetteeCore
import SetteeProtocol

/// The KV request pipeline's first step: one frame's opcode picks its handler. Session commands (HELLO, SASL,
/// SELECT_BUCKET, cluster config) are in `+Session`, FLUSH in `+Flush`, data requests in `+DataOperations` (shape
/// checks by `RequestShape`, the engine call, the response), a durable write's admission and wait in
/// `+Durability`, OBSERVE in `+Observe`, sub-document commands in `+Subdoc`, the
/// lock rules in `+Locks` (GET_AND_LOCK and UNLOCK_KEY are data requests), DCP in `+DCP`, STAT in `+Stats`.
extension KVConnectionHandler {
    func dispatch(_ frame: consuming Frame, context: ChannelHandlerContext) {
        // Every request passes here: a local user's roles are read again first when the users changed since they
        // were resolved (nothing for other principals; ADR 0008, decision 4). A deleted user's connection closes.
        guard userRolesCurrent() else { return }
        // The frame is moved here, not copied, and a key is rewritten in place (a copy of a frame is four retains and
        // four releases of the read buffer; a collection-aware request made one, issue 70's bench row).
        var frame = consume frame
        if state.collections && frame.opcode.carriesDocumentKey {
            guard inCollection(&frame) else { return }
        } else if frame.opcode.carriesDocumentKey && frame.key.readableBytesView.first == CollectionKey.engineMarker {
            // A default-collection key starting with the marker of named collections' engine keys is stored
            // escaped (ADR 0129 amendment): memcached's binary keys may start with any byte.
            guard escapeDefaultKey(&frame) else { return }
        }
        route(frame, context: context)
    }

    private func route(_ frame: Frame, context: ChannelHandlerContext) {
        switch frame.opcode {
        case .noop:
            emit { $0.writeResponseHeader(opcode: .noop, status: .success, opaque: frame.opaque) }
        case .version:
            emit {
                $0.writeResponse(
                    opcode: .version, status: .success, opaque: frame.opaque, value: Array(KVNode.version.utf8))
            }
        case .quit:
            emit { $0.writeResponseHeader(opcode: .quit, status: .success, opaque: frame.opaque) }
            closeAfterPending(context: context)
        case .quitq:
            closeAfterPending(context: context)
        case .hello:
            hello(frame)
        case .saslListMechs:
            emit {
                $0.writeResponse(
                    opcode: frame.opcode, status: .success, opaque: frame.opaque, value: Self.saslMechanisms)
            }
        case .saslAuth, .saslStep:
            sasl(frame)
        case .getErrorMap:
            emit {
                $0.writeResponse(
                    opcode: .getErrorMap, status: .success, opaque: frame.opaque, datatype: 1, value: ErrorMap.json)
            }
        case .selectBucket:
            selectBucket(frame)
        case .getClusterConfig:
            clusterConfig(frame)
        case .verbosity:
            emit { $0.writeResponseHeader(opcode: .verbosity, status: .success, opaque: frame.opaque) }
        case .stat:
            stat(frame)
        case .flush, .flushq:
            flush(frame)
        case .get, .getq, .getk, .getkq, .set, .setq, .add, .addq, .replace, .replaceq, .delete, .deleteq,
            .increment, .incrementq, .decrement, .decrementq, .append, .appendq, .prepend, .prependq, .touch, .gat,
            .gatq, .getMeta, .observeSeqno, .getReplica, .getLocked, .unlockKey, .setWithMeta, .addWithMeta,
            .delWithMeta:
            dataOperation(frame)
        case _ where frame.opcode.isSubdoc:
            dataOperation(frame)
        case .observe:
            observe(frame)
        case .getCollectionsManifest, .getCollectionID, .getScopeID:
            collectionOperation(frame)
        case .dcpOpen, .dcpStreamRequest, .dcpCloseStream, .dcpGetFailoverLog, .dcpControl, .dcpBufferAcknowledgement,
            .dcpSeqnoAcknowledged, .dcpNoop, .setVBucket, .getVBucket:
            dcpDispatch(frame, context: context)
        default:
            emit {
                $0.writeResponse(
                    opcode: frame.opcode, status: .unknownCommand, opaque: frame.opaque,
                    value: Array("Unknown command".utf8))
            }
        }
    }
}
