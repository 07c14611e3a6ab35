/* `loom data tokenize` (src/cli/cmd_data_tokenize.c), dispatched by src/cli/cmd_data.c. */
#ifndef LOOM_CLI_CMD_DATA_TOKENIZE_H
#define LOOM_CLI_CMD_DATA_TOKENIZE_H

/* argv[0] is "tokenize"; returns the exit status. */
int loom_cmd_data_tokenize(int argc, char **argv);
#endif
