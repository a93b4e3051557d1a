/*
 * Ferry's savepoint tool: every KafkaSource's positions in a Flink savepoint (or retained
 * checkpoint) printed as JSON ("read"), and a copy of it written with new positions and topic
 * names ("write"), with Flink's own classes throughout: Checkpoints.loadCheckpointMetadata and
 * storeCheckpointMetadata for the metadata, DefaultOperatorStateBackend to restore and snapshot
 * the readers' operator state (SourceOperator's "SourceReaderState" list), SourceCoordinator's
 * own bytes for the enumerator (FerryCoordinatorBytes), and the Kafka connector's
 * KafkaPartitionSplitSerializer and KafkaSourceEnumStateSerializer for splits and enumerator.
 *
 *   read PATH                 JSON on stdout
 *   write PATH NEW_DIR PLAN   NEW_DIR holds a copy of PATH's files; its _metadata and the Kafka
 *                             sources' reader state are written anew from PLAN (JSON)
 *
 * A usage or format problem is one line on stderr and exit 2.
 */
package ferry.flink.tool;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.io.DataInputStream;
import java.io.File;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.RunnableFuture;

import org.apache.flink.api.common.ExecutionConfig;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.typeutils.base.array.BytePrimitiveArraySerializer;
import org.apache.flink.connector.kafka.source.enumerator.KafkaSourceEnumState;
import org.apache.flink.connector.kafka.source.enumerator.KafkaSourceEnumStateSerializer;
import org.apache.flink.connector.kafka.source.enumerator.SplitAndAssignmentStatus;
import org.apache.flink.connector.kafka.source.split.KafkaPartitionSplit;
import org.apache.flink.connector.kafka.source.split.KafkaPartitionSplitSerializer;
import org.apache.flink.core.fs.CloseableRegistry;
import org.apache.flink.core.fs.FSDataOutputStream;
import org.apache.flink.core.fs.FileSystem;
import org.apache.flink.core.fs.Path;
import org.apache.flink.core.io.SimpleVersionedSerialization;
import org.apache.flink.runtime.checkpoint.CheckpointOptions;
import org.apache.flink.runtime.checkpoint.Checkpoints;
import org.apache.flink.runtime.checkpoint.OperatorState;
import org.apache.flink.runtime.checkpoint.OperatorSubtaskState;
import org.apache.flink.runtime.checkpoint.StateObjectCollection;
import org.apache.flink.runtime.checkpoint.metadata.CheckpointMetadata;
import org.apache.flink.runtime.checkpoint.metadata.MetadataV6Serializer;
import org.apache.flink.runtime.source.coordinator.FerryCoordinatorBytes;
import org.apache.flink.runtime.state.CompletedCheckpointStorageLocation;
import org.apache.flink.runtime.state.DefaultOperatorStateBackend;
import org.apache.flink.runtime.state.DefaultOperatorStateBackendBuilder;
import org.apache.flink.runtime.state.OperatorStateHandle;
import org.apache.flink.runtime.state.SnapshotResult;
import org.apache.flink.runtime.state.filesystem.AbstractFsCheckpointStorageAccess;
import org.apache.flink.runtime.state.filesystem.FsCheckpointStreamFactory;
import org.apache.flink.runtime.state.memory.ByteStreamStateHandle;
import org.apache.flink.streaming.api.operators.util.SimpleVersionedListState;
import org.apache.flink.util.StringUtils;
import org.apache.kafka.common.TopicPartition;

public final class FerrySavepointTool {
    /** The checkpoint metadata format Flink 2.1 and 2.2 write (and this tool writes back). */
    static final int SUPPORTED_METADATA_VERSION = MetadataV6Serializer.VERSION;
    /** SourceOperator.SPLITS_STATE_DESC (package-private there): the readers' split list. */
    static final String READER_STATE = "SourceReaderState";
    static final int FILE_STATE_THRESHOLD = 20 * 1024; // Flink's state.storage.fs.memory-threshold
    static final ObjectMapper JSON = new ObjectMapper();
    static final KafkaPartitionSplitSerializer SPLITS = new KafkaPartitionSplitSerializer();
    static final KafkaSourceEnumStateSerializer ENUMERATOR = new KafkaSourceEnumStateSerializer();
    static final ClassLoader LOADER = FerrySavepointTool.class.getClassLoader();

    static final class ToolError extends Exception {
        ToolError(String message) {
            super(message);
        }
    }

    public static void main(String[] args) throws Exception {
        try {
            if (args.length == 2 && args[0].equals("read")) {
                System.out.println(JSON.writeValueAsString(describe(load(args[1]))));
            } else if (args.length == 4 && args[0].equals("write")) {
                JsonNode plan = JSON.readTree(new File(args[3]));
                System.out.println(JSON.writeValueAsString(write(load(args[1]), args[2], plan)));
            } else {
                throw new ToolError("usage: read PATH | write PATH NEW_DIR PLAN_JSON");
            }
        } catch (ToolError e) {
            System.err.println("error: " + e.getMessage());
            System.exit(2);
        }
        System.exit(0);
    }

    record Loaded(String pointer, CheckpointMetadata metadata) {}

    static Loaded load(String path) throws Exception {
        CompletedCheckpointStorageLocation location;
        try {
            location = AbstractFsCheckpointStorageAccess.resolveCheckpointPointer(path);
        } catch (Exception e) {
            throw new ToolError(path + ": not a Flink savepoint or checkpoint (" + e.getMessage() + ")");
        }
        try (DataInputStream in =
                new DataInputStream(location.getMetadataHandle().openInputStream())) {
            int magic = in.readInt();
            int version = in.readInt();
            if (magic != Checkpoints.HEADER_MAGIC_NUMBER) {
                throw new ToolError(path + ": its _metadata is not Flink checkpoint metadata");
            }
            if (version != SUPPORTED_METADATA_VERSION) {
                throw new ToolError(path + ": checkpoint metadata version " + version
                        + " (" + writtenBy(version) + "): Ferry reads and writes version "
                        + SUPPORTED_METADATA_VERSION + " (Flink 2.1 and 2.2; its tool runs Flink "
                        + org.apache.flink.runtime.util.EnvironmentInformation.getVersion() + ")");
            }
        }
        try (DataInputStream in =
                new DataInputStream(location.getMetadataHandle().openInputStream())) {
            return new Loaded(location.getExternalPointer(),
                    Checkpoints.loadCheckpointMetadata(in, LOADER, location.getExternalPointer()));
        }
    }

    static String writtenBy(int version) {
        if (version == 5) {
            return "written by Flink 2.0";
        }
        return version < 5 ? "written by Flink 1.x" : "written by a Flink newer than 2.2";
    }

    /** The readers' splits of one subtask, or null when its state is not a Kafka source's. */
    static List<KafkaPartitionSplit> readerSplits(OperatorSubtaskState subtask) throws Exception {
        StateObjectCollection<OperatorStateHandle> handles = subtask.getManagedOperatorState();
        boolean hasReaderState = false;
        for (OperatorStateHandle h : handles) {
            hasReaderState |= h.getStateNameToPartitionOffsets().containsKey(READER_STATE);
        }
        if (!hasReaderState) {
            return null;
        }
        List<KafkaPartitionSplit> out = new ArrayList<>();
        for (byte[] raw : restore(handles).getListState(readerStateDescriptor()).get()) {
            KafkaPartitionSplit split;
            try {
                split = SimpleVersionedSerialization.readVersionAndDeSerialize(SPLITS, raw);
            } catch (Exception e) {
                return null; // another source's splits
            }
            // Only a Kafka split serializes back to the very same bytes.
            if (!java.util.Arrays.equals(SimpleVersionedSerialization.writeVersionAndSerialize(SPLITS, split), raw)) {
                return null;
            }
            out.add(split);
        }
        return out;
    }

    static ListStateDescriptor<byte[]> readerStateDescriptor() {
        return new ListStateDescriptor<>(READER_STATE, BytePrimitiveArraySerializer.INSTANCE);
    }

    static DefaultOperatorStateBackend restore(Collection<OperatorStateHandle> handles) throws Exception {
        return new DefaultOperatorStateBackendBuilder(
                        LOADER, new ExecutionConfig(), false, handles, new CloseableRegistry())
                .build();
    }

    static KafkaSourceEnumState enumerator(OperatorState op) {
        ByteStreamStateHandle handle = op.getCoordinatorState();
        if (handle == null) {
            return null;
        }
        try {
            return FerryCoordinatorBytes.readEnumeratorState(handle.getData(), ENUMERATOR);
        } catch (Exception e) {
            return null;
        }
    }

    /** Whether this operator is a KafkaSource: its readers' state holds Kafka splits only. */
    static Map<Integer, List<KafkaPartitionSplit>> kafkaReaders(OperatorState op) throws Exception {
        Map<Integer, List<KafkaPartitionSplit>> out = new HashMap<>();
        boolean any = false;
        for (Map.Entry<Integer, OperatorSubtaskState> e : op.getSubtaskStates().entrySet()) {
            List<KafkaPartitionSplit> splits = readerSplits(e.getValue());
            if (splits == null) {
                if (!e.getValue().getManagedOperatorState().isEmpty()) {
                    return null;
                }
                continue;
            }
            any |= !splits.isEmpty();
            out.put(e.getKey(), splits);
        }
        if (!any && enumerator(op) == null) {
            return null;
        }
        return out;
    }

    static ObjectNode split(KafkaPartitionSplit s) {
        ObjectNode n = JSON.createObjectNode();
        n.put("topic", s.getTopic());
        n.put("partition", s.getPartition());
        n.put("offset", s.getStartingOffset());
        if (s.getStoppingOffset().isPresent()) {
            n.put("stopping_offset", s.getStoppingOffset().get());
        } else {
            n.putNull("stopping_offset");
        }
        return n;
    }

    static ObjectNode describe(Loaded loaded) throws Exception {
        CheckpointMetadata md = loaded.metadata();
        ObjectNode root = JSON.createObjectNode();
        root.put("path", loaded.pointer());
        root.put("checkpoint_id", md.getCheckpointId());
        root.put("metadata_version", SUPPORTED_METADATA_VERSION);
        root.put("operators", md.getOperatorStates().size());
        ArrayNode sources = root.putArray("sources");
        for (OperatorState op : md.getOperatorStates()) {
            Map<Integer, List<KafkaPartitionSplit>> readers = kafkaReaders(op);
            if (readers == null) {
                continue;
            }
            ObjectNode s = sources.addObject();
            s.put("operator_id", op.getOperatorID().toHexString());
            s.put("uid", op.getOperatorUid().orElse(null));
            s.put("name", op.getOperatorName().orElse(null));
            s.put("parallelism", op.getParallelism());
            ArrayNode subtasks = s.putArray("readers");
            for (Map.Entry<Integer, List<KafkaPartitionSplit>> e : readers.entrySet()) {
                for (KafkaPartitionSplit split : e.getValue()) {
                    subtasks.add(split(split).put("subtask", e.getKey()));
                }
            }
            KafkaSourceEnumState en = enumerator(op);
            if (en == null) {
                s.putNull("enumerator");
            } else {
                ObjectNode enode = s.putObject("enumerator");
                enode.put("initial_discovery_finished", en.initialDiscoveryFinished());
                ArrayNode splits = enode.putArray("splits");
                for (SplitAndAssignmentStatus sa : en.splits()) {
                    splits.add(split(sa.split()).put("status", sa.assignmentStatus().name()));
                }
            }
        }
        return root;
    }

    /** The split PLAN gives for this one (topic, partition), or an error naming it. */
    static KafkaPartitionSplit replaced(JsonNode entries, String where, KafkaPartitionSplit s)
            throws ToolError {
        JsonNode e = entries == null ? null : entries.get(s.getTopic() + "\u0000" + s.getPartition());
        if (e == null) {
            throw new ToolError(where + ": no translation for " + s.getTopic() + "[" + s.getPartition() + "]");
        }
        long stopping = e.get("stopping_offset").isNull()
                ? KafkaPartitionSplit.NO_STOPPING_OFFSET : e.get("stopping_offset").asLong();
        return new KafkaPartitionSplit(
                new TopicPartition(e.get("topic").asText(), s.getPartition()),
                e.get("offset").asLong(), stopping);
    }

    static ObjectNode write(Loaded loaded, String newDir, JsonNode plan) throws Exception {
        CheckpointMetadata md = loaded.metadata();
        Path dir = new Path(newDir);
        FileSystem fs = dir.getFileSystem();
        FsCheckpointStreamFactory streams =
                new FsCheckpointStreamFactory(fs, dir, dir, FILE_STATE_THRESHOLD, 4096);
        List<OperatorState> states = new ArrayList<>();
        Set<String> done = new HashSet<>();
        int splitsWritten = 0;
        for (OperatorState op : md.getOperatorStates()) {
            String id = op.getOperatorID().toHexString();
            Map<Integer, List<KafkaPartitionSplit>> readers = kafkaReaders(op);
            if (readers == null || op.isFullyFinished()) {
                states.add(op);
                continue;
            }
            JsonNode source = plan.path("sources").get(id);
            if (source == null) {
                throw new ToolError("the plan has no entry for Kafka source " + id);
            }
            OperatorState copy = new OperatorState(op.getOperatorName().orElse(null),
                    op.getOperatorUid().orElse(null), op.getOperatorID(),
                    op.getParallelism(), op.getMaxParallelism());
            for (Map.Entry<Integer, OperatorSubtaskState> e : op.getSubtaskStates().entrySet()) {
                OperatorSubtaskState subtask = e.getValue();
                List<KafkaPartitionSplit> splits = readers.get(e.getKey());
                if (splits == null) {
                    copy.putState(e.getKey(), subtask);
                    continue;
                }
                List<KafkaPartitionSplit> translated = new ArrayList<>();
                for (KafkaPartitionSplit s : splits) {
                    translated.add(replaced(source.get("readers"), id + " subtask " + e.getKey(), s));
                }
                DefaultOperatorStateBackend backend = restore(subtask.getManagedOperatorState());
                ListState<byte[]> raw = backend.getListState(readerStateDescriptor());
                new SimpleVersionedListState<>(raw, SPLITS).update(translated);
                RunnableFuture<SnapshotResult<OperatorStateHandle>> snapshot = backend.snapshot(
                        md.getCheckpointId(), System.currentTimeMillis(), streams,
                        CheckpointOptions.forCheckpointWithDefaultLocation());
                snapshot.run();
                OperatorStateHandle handle = snapshot.get().getJobManagerOwnedSnapshot();
                backend.dispose();
                copy.putState(e.getKey(), subtask.toBuilder()
                        .setManagedOperatorState(handle == null
                                ? StateObjectCollection.empty()
                                : StateObjectCollection.singleton(handle))
                        .build());
                splitsWritten += translated.size();
            }
            KafkaSourceEnumState en = enumerator(op);
            if (en != null) {
                Set<SplitAndAssignmentStatus> splits = new HashSet<>();
                for (SplitAndAssignmentStatus sa : en.splits()) {
                    splits.add(new SplitAndAssignmentStatus(
                            replaced(source.get("enumerator"), id + " enumerator", sa.split()),
                            sa.assignmentStatus()));
                }
                byte[] bytes = FerryCoordinatorBytes.writeEnumeratorState(
                        new KafkaSourceEnumState(splits, en.initialDiscoveryFinished()), ENUMERATOR);
                copy.setCoordinatorState(
                        new ByteStreamStateHandle(op.getCoordinatorState().getHandleName(), bytes));
            } else if (op.getCoordinatorState() != null) {
                copy.setCoordinatorState(op.getCoordinatorState());
            }
            states.add(copy);
            done.add(id);
        }
        CheckpointMetadata out = new CheckpointMetadata(
                md.getCheckpointId(), states, md.getMasterStates(), md.getCheckpointProperties());
        Path metadata = new Path(dir, AbstractFsCheckpointStorageAccess.METADATA_FILE_NAME);
        try (FSDataOutputStream stream = fs.create(metadata, FileSystem.WriteMode.OVERWRITE)) {
            Checkpoints.storeCheckpointMetadata(out, stream);
        }
        ObjectNode result = JSON.createObjectNode();
        result.put("path", newDir);
        result.put("sources", done.size());
        result.put("reader_splits", splitsWritten);
        return result;
    }

    static String hex(byte[] bytes) {
        return StringUtils.byteToHexString(bytes);
    }
}
