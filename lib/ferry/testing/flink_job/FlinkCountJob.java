/*
 * The tests' Flink job: a KafkaSource (uid "kafka-source", parallelism 2) read slowly, a count
 * per key in keyed state (uid "counter"), a sink appending one line per record to a file
 * (uid "sink"). Runs on a local mini-cluster in this JVM, optionally restored from a savepoint.
 * Values are "KEY,PAYLOAD"; each sink line is "KEY<TAB>COUNT<TAB>VALUE".
 *
 *   BOOTSTRAP TOPIC SINK_FILE RESTORE|- stop AFTER SAVEPOINT_DIR   stop with a savepoint once
 *                                                                 AFTER lines are in the sink
 *   BOOTSTRAP TOPIC SINK_FILE RESTORE|- run EXPECT QUIET_S          run until EXPECT lines and
 *                                                                 QUIET_S seconds without a new
 *                                                                 one (or 3 × QUIET_S), cancel
 * A last argument GROUP restarts the job as `--into-group` asks: the source under a new uid
 * ("kafka-source-2") from GROUP's committed offsets, the old source's state not restored
 * (allowNonRestoredState), every other operator's (the counts) restored from RESTORE.
 * Prints "SAVEPOINT path" or "DONE lines"; "FAILED why" and exit 3 when the job fails.
 */
package ferry.testing.flink;

import java.io.BufferedWriter;
import java.io.FileWriter;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Paths;

import org.apache.flink.api.common.JobStatus;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.api.connector.sink2.WriterInitContext;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.configuration.StateRecoveryOptions;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.connector.kafka.source.reader.deserializer.KafkaRecordDeserializationSchema;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;
import org.apache.kafka.common.serialization.StringDeserializer;

public final class FlinkCountJob {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], sinkFile = args[2], restore = args[3];
        String mode = args[4];
        Configuration conf = new Configuration();
        conf.set(RestartStrategyOptions.RESTART_STRATEGY, "none");
        String group = args.length > 7 ? args[7] : null;
        if (!restore.equals("-")) {
            conf.set(StateRecoveryOptions.SAVEPOINT_PATH, restore);
            conf.set(StateRecoveryOptions.SAVEPOINT_IGNORE_UNCLAIMED_STATE, group != null);
        }
        StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(2, conf);
        KafkaSource<String> source = KafkaSource.<String>builder()
                .setBootstrapServers(bootstrap)
                .setTopics(topic)
                .setGroupId(group != null ? group : "ferry-flink-test")
                .setStartingOffsets(group != null
                        ? OffsetsInitializer.committedOffsets()
                        : OffsetsInitializer.earliest())
                .setDeserializer(KafkaRecordDeserializationSchema.valueOnly(StringDeserializer.class))
                .build();
        env.fromSource(source, WatermarkStrategy.noWatermarks(), "kafka")
                .uid(group != null ? "kafka-source-2" : "kafka-source")
                .map(new Slow()).uid("slow")
                .keyBy(v -> v.split(",", 2)[0])
                .process(new Count()).uid("counter")
                .sinkTo(new LineSink(sinkFile)).uid("sink").setParallelism(1);
        JobClient client = env.executeAsync("ferry-flink-count");
        long target = Long.parseLong(args[5]);
        if (mode.equals("stop")) {
            while (lines(sinkFile) < target) {
                checkRunning(client);
                Thread.sleep(20);
            }
            String path = client.stopWithSavepoint(false, args[6], SavepointFormatType.CANONICAL).get();
            System.out.println("SAVEPOINT " + path);
        } else {
            long quietMs = Long.parseLong(args[6]) * 1000;
            long seen = -1, since = System.currentTimeMillis();
            while (true) {
                checkRunning(client);
                long now = lines(sinkFile);
                if (now != seen) {
                    seen = now;
                    since = System.currentTimeMillis();
                }
                long quiet = System.currentTimeMillis() - since;
                if ((seen >= target && quiet >= quietMs) || quiet >= 3 * quietMs) {
                    break;
                }
                Thread.sleep(100);
            }
            client.cancel().get();
            System.out.println("DONE " + lines(sinkFile));
        }
        System.out.flush();
        System.exit(0);
    }

    static void checkRunning(JobClient client) throws Exception {
        JobStatus status = client.getJobStatus().get();
        if (status.isGloballyTerminalState()) {
            String why = status.toString();
            try {
                client.getJobExecutionResult().get();
            } catch (Exception e) {
                Throwable t = e;
                while (t.getCause() != null) {
                    t = t.getCause();
                }
                why = t.toString().replace('\n', ' ');
            }
            System.out.println("FAILED " + why);
            System.out.flush();
            System.exit(3);
        }
    }

    static long lines(String file) throws IOException {
        if (!Files.exists(Paths.get(file))) {
            return 0;
        }
        try (var stream = Files.lines(Paths.get(file))) {
            return stream.count();
        }
    }

    /** Slows the source down so that a savepoint falls mid-topic. */
    static final class Slow implements MapFunction<String, String> {
        @Override
        public String map(String value) throws Exception {
            Thread.sleep(3);
            return value;
        }
    }

    static final class Count extends KeyedProcessFunction<String, String, String> {
        private transient ValueState<Long> count;

        @Override
        public void open(org.apache.flink.api.common.functions.OpenContext ctx) {
            count = getRuntimeContext().getState(new ValueStateDescriptor<>("count", Long.class));
        }

        @Override
        public void processElement(String value, Context ctx, Collector<String> out)
                throws Exception {
            long n = (count.value() == null ? 0 : count.value()) + 1;
            count.update(n);
            out.collect(ctx.getCurrentKey() + "\t" + n + "\t" + value);
        }
    }

    /** Appends each record as a line, flushed at once (the test reads the file as it grows). */
    static final class LineSink implements Sink<String> {
        private final String file;

        LineSink(String file) {
            this.file = file;
        }

        @Override
        public SinkWriter<String> createWriter(WriterInitContext context) throws IOException {
            BufferedWriter w = new BufferedWriter(new FileWriter(file, true));
            return new SinkWriter<>() {
                @Override
                public void write(String element, Context c) throws IOException {
                    w.write(element);
                    w.write('\n');
                    w.flush();
                }

                @Override
                public void flush(boolean endOfInput) throws IOException {
                    w.flush();
                }

                @Override
                public void close() throws IOException {
                    w.close();
                }
            };
        }
    }
}
